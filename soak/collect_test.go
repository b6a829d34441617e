package soak_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/audit"
	"github.com/rebill/rebill/audit/billcheck"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/soak"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// The soak judges bills with the rules `rebill audit` judges them with,
// so it must read the same books: a figure it left unread is judged as 0.
// A fine paid in part outside rebill is charged the rest; read without
// what its charge found paid outside, that capture is neither the full
// nor the discounted price (seeds 917684-917686 and 70844 failed so).
func TestCollectBillsReadsChargesAsTheAuditDoes(t *testing.T) {
	ctx := context.Background()
	db := dbtest.Pool(t)
	now := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	store := enrollments.NewStore(testsupport.NewClock(now))
	rules := enrollments.Rules{Dunning: []time.Duration{24 * time.Hour}, CaptureMargin: time.Hour}
	const id, paid = "18810100000011799311", 22500
	deadline, err := enrollments.ParseDate("2027-03-03")
	if err != nil {
		t.Fatal(err)
	}
	due, err := enrollments.ParseDate("2027-03-21")
	if err != nil {
		t.Fatal(err)
	}
	discounted := int64(25000)
	var c charges.Charge
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		e, err := store.Create(ctx, tx, enrollments.New{CustomerID: "payer-7", Kind: enrollments.Fines,
			AccountRef: enrollments.AccountRef{STS: "77УА000005"}, Currency: "RUB", MaxAmount: 1000000,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim2", Token: "tok_ok_0001", ExpMonth: 12, ExpYear: 2035}})
		if err != nil {
			return err
		}
		b, _, err := store.Push(ctx, tx, e, enrollments.BillInput{BillID: id, Amount: 50000, IssuedAt: now, DueDate: due,
			DiscountDeadline: &deadline, DiscountedAmount: &discounted}, rules)
		if err != nil {
			return err
		}
		c, _, err = (&charges.Store{Queue: insertOnly(t, db)}).CreateForBill(ctx, tx, charges.NewBillCharge{EnrollmentID: e.ID, CustomerID: e.CustomerID, BillID: id,
			Due: b.PayAt, Amount: discounted - paid, FullAmount: 50000 - paid, DiscountUntil: b.DiscountEnds(), Currency: "RUB",
			Gateway: "sim2", Token: "tok_ok_0001", RegistryUIN: id, PaidOutside: paid, Identity: b.Identity}, now)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	r := &runner{t: t, ctx: ctx, db: db}
	got := r.collectBills(&soak.Data{Now: now, Ledger: []soak.LedgerOp{{Gateway: "sim2", Op: "capture",
		IdempotencyKey: c.Key() + ":a1:capture", Amount: 50000 - paid, Currency: "RUB", Status: "succeeded", At: now}}})
	want, err := audit.BillData(ctx, db, nil, now.Add(-time.Hour), now.Add(time.Hour), audit.Bills{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Charges) != fmt.Sprint(want.Charges) {
		t.Errorf("the soak reads the charges\n%+v\nrebill audit reads\n%+v", got.Charges, want.Charges)
	}
	for _, v := range billcheck.Check(got) {
		if v.Invariant == billcheck.DiscountHonest {
			t.Errorf("the rest after %d paid outside rebill is judged wrong: %s", paid, v.Detail)
		}
	}
}
