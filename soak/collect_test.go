package soak_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
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
	"github.com/rebill/rebill/zhkh/party"
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

// collect reads what the invariants judge: every subscription the schedule
// created (API), its events (API), its charges (database: the period start
// and a few fields the API does not show), and the gateways' ledgers (API).
func (r *runner) collect() *soak.Data {
	t := r.t
	var clock struct {
		Now time.Time `json:"now"`
	}
	if a, ok := r.request(0, http.MethodGet, "/v1/dev/clock", "", nil, 60*time.Second); !ok || a.decode(&clock) != nil {
		t.Fatalf("read the clock: %d %s", a.status, a.body)
	}
	d := &soak.Data{Now: clock.Now, Observed: &r.obs}
	var ids []string
	for _, id := range r.subIDs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a, ok := r.request(0, http.MethodGet, "/v1/subscriptions/"+id, "", nil, 60*time.Second)
		var s struct {
			ID                string     `json:"id"`
			CustomerID        string     `json:"customer_id"`
			Status            string     `json:"status"`
			Amount            int64      `json:"amount"`
			Currency          string     `json:"currency"`
			Interval          string     `json:"interval"`
			IntervalCount     int        `json:"interval_count"`
			TimeZone          string     `json:"timezone"`
			BillingAnchor     time.Time  `json:"billing_anchor"`
			CancelAtPeriodEnd bool       `json:"cancel_at_period_end"`
			CancelledAt       *time.Time `json:"cancelled_at"`
			CreatedAt         time.Time  `json:"created_at"`
			TrialEnd          *time.Time `json:"trial_end"`
		}
		if !ok || a.status != 200 || a.decode(&s) != nil {
			t.Fatalf("read subscription %s: %d %s", id, a.status, a.body)
		}
		sub := soak.Subscription{ID: s.ID, CustomerID: s.CustomerID, Status: s.Status, Amount: s.Amount, Currency: s.Currency,
			Interval: s.Interval, IntervalCount: s.IntervalCount, TimeZone: s.TimeZone, BillingAnchor: s.BillingAnchor,
			CancelAtPeriodEnd: s.CancelAtPeriodEnd, CancelledAt: s.CancelledAt, CreatedAt: s.CreatedAt, TrialEnd: s.TrialEnd}
		cursor := ""
		for {
			path := "/v1/subscriptions/" + id + "/events?limit=100"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			a, ok := r.request(0, http.MethodGet, path, "", nil, 60*time.Second)
			var page struct {
				Data []struct {
					ID    int64   `json:"id"`
					Type  string  `json:"type"`
					From  *string `json:"from_status"`
					To    string  `json:"to_status"`
					Actor struct {
						ID   string `json:"id"`
						Role string `json:"role"`
					} `json:"actor"`
					At time.Time `json:"at"`
				} `json:"data"`
				NextCursor *string `json:"next_cursor"`
			}
			if !ok || a.status != 200 || a.decode(&page) != nil {
				t.Fatalf("read events of %s: %d %s", id, a.status, a.body)
			}
			for _, e := range page.Data {
				from := ""
				if e.From != nil {
					from = *e.From
				}
				sub.Events = append(sub.Events, soak.Event{ID: e.ID, Type: e.Type, From: from, To: e.To,
					ActorID: e.Actor.ID, ActorRole: e.Actor.Role, At: e.At})
			}
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		d.Subscriptions = append(d.Subscriptions, sub)
	}
	byID := map[string]*soak.Subscription{}
	for i := range d.Subscriptions {
		byID[d.Subscriptions[i].ID] = &d.Subscriptions[i]
	}
	rows, err := r.db.Query(r.ctx, `SELECT id::text, subscription_id::text, period_key, period_start, amount, currency, gateway,
		status, attempt_count, next_attempt_at, coalesce(failure_code, ''), coalesce(review_reason, ''),
		coalesce(unknown_phase, ''), coalesce(resolution, '') FROM charges WHERE subscription_id IS NOT NULL
		ORDER BY period_start, id`)
	if err != nil {
		t.Fatalf("read charges: %v", err)
	}
	for rows.Next() {
		var c soak.Charge
		if err := rows.Scan(&c.ID, &c.SubscriptionID, &c.PeriodKey, &c.PeriodStart, &c.Amount, &c.Currency, &c.Gateway,
			&c.Status, &c.AttemptCount, &c.NextAttemptAt, &c.FailureCode, &c.ReviewReason, &c.UnknownPhase, &c.Resolution); err != nil {
			t.Fatalf("read charges: %v", err)
		}
		c.PeriodStart = c.PeriodStart.UTC()
		c.Key = c.SubscriptionID + ":" + c.PeriodKey
		if s := byID[c.SubscriptionID]; s != nil {
			s.Charges = append(s.Charges, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatalf("read charges: %v", err)
	}
	r.collectChanges(byID)
	refunds, err := r.db.Query(r.ctx, `SELECT id::text, charge_id::text, n, gateway_key, amount, currency, status
		FROM refunds ORDER BY gateway_key`)
	if err != nil {
		t.Fatalf("read refunds: %v", err)
	}
	var rf soak.Refund
	if _, err := pgx.ForEachRow(refunds, []any{&rf.ID, &rf.ChargeID, &rf.N, &rf.GatewayKey, &rf.Amount, &rf.Currency, &rf.Status},
		func() error {
			rf.ChargeKey, _, _ = charges.ParseRefundKey(rf.GatewayKey)
			d.Refunds = append(d.Refunds, rf)
			return nil
		}); err != nil {
		t.Fatalf("read refunds: %v", err)
	}
	r.collectHousing(t, d)
	slots, err := r.db.Query(r.ctx, `SELECT customer_id, unnest(slots) FROM velocity_counters WHERE name = 'declines' ORDER BY 1, 2`)
	if err != nil {
		t.Fatalf("read velocity slots: %v", err)
	}
	var slot soak.Slot
	if _, err := pgx.ForEachRow(slots, []any{&slot.Customer, &slot.Holder}, func() error {
		d.Slots = append(d.Slots, slot)
		return nil
	}); err != nil {
		t.Fatalf("read velocity slots: %v", err)
	}
	for i := 1; i <= 5; i++ {
		gw := fmt.Sprintf("sim%d", i)
		a, ok := r.request(0, http.MethodGet, "/v1/dev/gateways/"+gw+"/ledger", "", nil, 60*time.Second)
		var page struct {
			Data []struct {
				Op             string    `json:"op"`
				IdempotencyKey string    `json:"idempotency_key"`
				Reference      string    `json:"reference"`
				TokenLast4     string    `json:"token_last4"`
				Amount         int64     `json:"amount"`
				Currency       string    `json:"currency"`
				Status         string    `json:"status"`
				DeclineCode    string    `json:"decline_code"`
				At             time.Time `json:"received_at"` // real time, as the soak's requests; at is the dev clock
			} `json:"data"`
		}
		if !ok || a.status != 200 || a.decode(&page) != nil {
			t.Fatalf("read the ledger of %s: %d", gw, a.status)
		}
		for _, o := range page.Data {
			d.Ledger = append(d.Ledger, soak.LedgerOp{Gateway: gw, Op: o.Op, IdempotencyKey: o.IdempotencyKey, Reference: o.Reference,
				TokenLast4: o.TokenLast4, Amount: o.Amount, Currency: o.Currency, Status: o.Status, DeclineCode: o.DeclineCode, At: o.At})
		}
	}
	return d
}

// collectChanges reads the changes of the subscriptions' terms and their
// credit ledgers from the database.
func (r *runner) collectChanges(byID map[string]*soak.Subscription) {
	t := r.t
	changes, err := r.db.Query(r.ctx, `SELECT id::text, subscription_id::text, effective, proration, amount_before, amount_after,
			interval_before, interval_after, interval_count_before, interval_count_after, coalesce(period_key, ''), adjustment,
			created_at, applied_at
		FROM subscription_changes ORDER BY created_at, id`)
	if err != nil {
		t.Fatalf("read subscription changes: %v", err)
	}
	var c soak.Change
	var sub string
	if _, err := pgx.ForEachRow(changes, []any{&c.ID, &sub, &c.Effective, &c.Proration, &c.AmountBefore, &c.AmountAfter,
		&c.IntervalBefore, &c.IntervalAfter, &c.CountBefore, &c.CountAfter, &c.PeriodKey, &c.Adjustment, &c.CreatedAt, &c.AppliedAt},
		func() error {
			if s := byID[sub]; s != nil {
				s.Changes = append(s.Changes, c)
			}
			return nil
		}); err != nil {
		t.Fatalf("read subscription changes: %v", err)
	}
	credits, err := r.db.Query(r.ctx, `SELECT subscription_id::text, coalesce(change_id::text, ''), coalesce(period_key, ''),
			period_start, amount, created_at
		FROM subscription_credits ORDER BY created_at, amount DESC`)
	if err != nil {
		t.Fatalf("read subscription credits: %v", err)
	}
	var cr soak.Credit
	if _, err := pgx.ForEachRow(credits, []any{&sub, &cr.ChangeID, &cr.PeriodKey, &cr.PeriodStart, &cr.Amount, &cr.At}, func() error {
		if s := byID[sub]; s != nil {
			s.Credits = append(s.Credits, cr)
		}
		return nil
	}); err != nil {
		t.Fatalf("read subscription credits: %v", err)
	}
}

// collectHousing reads the housing bills' charges and the simulated GIS
// ZhKH party's ledger, each report matched to its charge by the report id
// derived from the charge.
func (r *runner) collectHousing(t *testing.T, d *soak.Data) {
	t.Helper()
	ledger, err := r.db.Query(r.ctx, `SELECT report_id, amount, status FROM dev_zhkh_ledger ORDER BY seq`)
	if err != nil {
		t.Fatalf("read the GIS ZhKH ledger: %v", err)
	}
	byID := map[string][]soak.ZhkhEntry{}
	var e soak.ZhkhEntry
	if _, err := pgx.ForEachRow(ledger, []any{&e.ReportID, &e.Amount, &e.Status}, func() error {
		byID[e.ReportID] = append(byID[e.ReportID], e)
		return nil
	}); err != nil {
		t.Fatalf("read the GIS ZhKH ledger: %v", err)
	}
	housing, err := r.db.Query(r.ctx, `SELECT c.id::text, c.enrollment_id::text || ':' || c.period_key, c.status, c.amount,
			c.amount_refunded, coalesce(b.document_identity, '')
		FROM charges c JOIN enrollments e ON e.id = c.enrollment_id
			LEFT JOIN bills b ON b.enrollment_id = c.enrollment_id AND b.bill_id = c.period_key
		WHERE e.kind = 'housing' ORDER BY c.id`)
	if err != nil {
		t.Fatalf("read housing charges: %v", err)
	}
	var h soak.HousingPayment
	if _, err := pgx.ForEachRow(housing, []any{&h.ChargeID, &h.Key, &h.Status, &h.Amount, &h.Refunded, &h.Document}, func() error {
		id := party.ReportID(h.Key)
		h.Reports = byID[id]
		delete(byID, id)
		d.Housing = append(d.Housing, h)
		return nil
	}); err != nil {
		t.Fatalf("read housing charges: %v", err)
	}
	for _, entries := range byID {
		d.ZhkhStray = append(d.ZhkhStray, entries...)
	}
}

// zhkhCounts is how the housing bills named payment documents and how
// their reports ended, for a schedule's summary: the bills with an ИПД,
// their copies left duplicate, the charges of them, and the reports by
// rebill's status and by the party's ledger's.
func (r *runner) zhkhCounts() map[string]int {
	out := map[string]int{}
	rows, err := r.db.Query(r.ctx, `SELECT 'bills_with_document', count(*) FROM bills WHERE document_identity IS NOT NULL
		UNION ALL SELECT 'duplicates_with_document', count(*) FROM bills WHERE document_identity IS NOT NULL AND status = 'duplicate'
		UNION ALL SELECT 'charges_with_document', count(*) FROM charges WHERE document_identity IS NOT NULL
		UNION ALL SELECT 'reports_' || status, count(*) FROM zhkh_reports GROUP BY status
		UNION ALL SELECT 'ledger_' || status, count(*) FROM dev_zhkh_ledger GROUP BY status`)
	if err != nil {
		r.t.Errorf("count GIS ZhKH reports: %v", err)
		return out
	}
	var k string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil }); err != nil {
		r.t.Errorf("count GIS ZhKH reports: %v", err)
	}
	return out
}
