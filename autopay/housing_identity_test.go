package autopay_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/autopay/billsource"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
)

const (
	els         = "75ДА533315"
	paymentDoc  = "75ДА533315-01-6011"
	serviceID   = "75ДА533315-01"
	housingDue  = "2027-03-25"
	housingBill = int64(100000)
)

// withDocument is the housing bill id with its payment document and the
// rest of its GIS ZhKH identifiers.
func withDocument(t *testing.T, id string) enrollments.BillInput {
	in := housing(t, id, housingBill, housingDue)
	in.PaymentDocumentID, in.ServiceID, in.Period = paymentDoc, serviceID, "2027-02"
	in.Supplier = enrollments.Supplier{INN: "7743013901", KPP: "773601001", Name: "УК Дом"}
	return in
}

// paying returns the bills of the enrollments with bill ids that are
// being paid, and how many charges exist.
func (b *testBundle) housingOutcome(t *testing.T) (paying, duplicates, charged int) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE status = 'paying'), count(*) FILTER (WHERE status = 'duplicate'),
		(SELECT count(*) FROM charges) FROM bills`).Scan(&paying, &duplicates, &charged))
	return paying, duplicates, charged
}

// A bill with its payment document claims both identities: the copy of
// the same account and bill id without the document, and a copy under
// another bill id with the document, are duplicates, in whichever order
// they arrive.
func TestHousingBillWithAPaymentDocumentIsPaidOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first func(*testing.T, string) enrollments.BillInput
		then  func(*testing.T, string) enrollments.BillInput
		// thenID is the second copy's bill id.
		thenID string
	}{
		{"with the document, then without", withDocument, plain, "H-1"},
		{"without the document, then with", plain, withDocument, "H-1"},
		{"the document under two bill ids", withDocument, withDocument, "ЕПД-2027-02"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			first := b.enrol(t, housingOf("cus_1", els, 0, 1000000))
			second := b.enrol(t, housingOf("cus_2", els, 0, 1000000))
			paid := b.mustPush(t, first, tc.first(t, "H-1"))
			require.Equal(t, enrollments.BillPaying, paid.Status)
			dup := b.mustPush(t, second, tc.then(t, tc.thenID))
			require.Equal(t, enrollments.BillDuplicate, dup.Status)
			require.Equal(t, first.ID, *dup.PaidByEnrollmentID)
			b.scan(t)
			paying, duplicates, charged := b.housingOutcome(t)
			require.Equal(t, []int{1, 1, 1}, []int{paying, duplicates, charged}, "one copy paid, by one charge")
		})
	}
}

func plain(t *testing.T, id string) enrollments.BillInput {
	return housing(t, id, housingBill, housingDue)
}

// A copy of a stored bill that adds or leaves out its identifiers is the
// same bill: no conflict, and the first copy's identifiers stand.
func TestHousingBillCopyWithOrWithoutIdentifiersIsTheSameBill(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", els, 0, 1000000))
	stored := b.mustPush(t, e, plain(t, "H-1"))
	again, created, err := b.push(t, e, withDocument(t, "H-1"))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, stored.ID, again.ID)
	require.Empty(t, again.PaymentDocumentID)

	withDoc := b.mustPush(t, e, withDocument(t, "H-2"))
	require.Equal(t, paymentDoc, withDoc.PaymentDocumentID)
	require.Equal(t, "ipd:"+paymentDoc, withDoc.DocumentIdentity)
	require.Equal(t, enrollments.Supplier{INN: "7743013901", KPP: "773601001", Name: "УК Дом"}, withDoc.Supplier)
	_, created, err = b.push(t, e, plain(t, "H-2"))
	require.NoError(t, err)
	require.False(t, created)
	other := withDocument(t, "H-2")
	other.Period = "2027-01"
	_, _, err = b.push(t, e, other)
	require.ErrorIs(t, err, enrollments.ErrBillConflict, "a different period is another bill's content")
}

// A bill whose identifier does not fit is refused naming the field, and
// nothing is stored; a Latin look-alike letter is stored in Cyrillic.
func TestHousingBillWithABadIdentifierIsRefusedAndNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.enrol(t, housingOf("cus_1", els, 0, 1000000))
	for field, change := range map[string]func(*enrollments.BillInput){
		"payment_document_id": func(in *enrollments.BillInput) { in.PaymentDocumentID = "75ДА533315-01" },
		"service_id":          func(in *enrollments.BillInput) { in.ServiceID = "77АБ000001-01" },
		"period":              func(in *enrollments.BillInput) { in.Period = "02.2027" },
		"supplier_inn":        func(in *enrollments.BillInput) { in.Supplier.INN = "7743013902" },
		"supplier_kpp":        func(in *enrollments.BillInput) { in.Supplier.KPP = "7736010" },
	} {
		in := withDocument(t, "H-"+field)
		change(&in)
		_, _, err := b.push(t, e, in)
		var fields rebilltype.Errors
		require.ErrorAs(t, err, &fields, field)
		require.Len(t, fields, 1)
		require.Equal(t, field, fields[0].Field)
	}
	_, _, charged := b.housingOutcome(t)
	var bills int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM bills`).Scan(&bills))
	require.Equal(t, []int{0, 0}, []int{bills, charged}, "nothing stored")

	latin := withDocument(t, "H-latin")
	latin.PaymentDocumentID, latin.ServiceID = "75ДA533315-01-6011", "75дa533315-01"
	stored := b.mustPush(t, e, latin)
	require.Equal(t, paymentDoc, stored.PaymentDocumentID)
	require.Equal(t, serviceID, stored.ServiceID)
}

// Copies of one bill pushed to three enrollments and pulled from the
// source all at once are paid by exactly one charge: copies of one
// account's bill id with and without its payment document, and copies
// of one payment document under several bill ids.
func TestConcurrentCopiesOfAHousingBillMakeOneCharge(t *testing.T) {
	t.Parallel()
	type copyOf struct {
		enrollment int
		in         func(*testing.T, string) enrollments.BillInput
		billID     string
	}
	for _, tc := range []struct {
		name      string
		published billsource.Bill
		pushes    []copyOf
	}{
		{"one bill id, with and without the document",
			billsource.Bill{BillID: "H-1", Account: billsource.Account{ELS: els}, Amount: housingBill, IssuedAt: start,
				DueDate: housingDue, PaymentDocumentID: paymentDoc},
			[]copyOf{{0, plain, "H-1"}, {1, withDocument, "H-1"}, {2, plain, "H-1"}, {1, plain, "H-1"}}},
		{"one bill id, the source without the document",
			billsource.Bill{BillID: "H-1", Account: billsource.Account{ELS: els}, Amount: housingBill, IssuedAt: start,
				DueDate: housingDue},
			[]copyOf{{0, withDocument, "H-1"}, {1, withDocument, "H-1"}, {2, plain, "H-1"}}},
		{"one document, several bill ids",
			billsource.Bill{BillID: "H-1", Account: billsource.Account{ELS: els}, Amount: housingBill, IssuedAt: start,
				DueDate: housingDue, PaymentDocumentID: paymentDoc},
			[]copyOf{{0, withDocument, "ЕПД-1"}, {1, withDocument, "ЕПД-2"}, {2, withDocument, "ЕПД-3"}, {1, withDocument, "H-1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setupSource(t, 0, 50)
			s.autopay.Sources = map[enrollments.Kind]autopay.BillSource{enrollments.Housing: s.autopay.Sources[enrollments.Fines]}
			var enrolled []enrollments.Enrollment
			for _, c := range []string{"cus_1", "cus_2", "cus_3"} {
				enrolled = append(enrolled, s.enrol(t, housingOf(c, els, 0, 1000000)))
			}
			s.fake.Publish(tc.published)
			var wg sync.WaitGroup
			errs := make(chan error, 4*len(tc.pushes)+4)
			for range 4 {
				for _, p := range tc.pushes {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs <- pgx.BeginFunc(context.Background(), s.pool, func(tx pgx.Tx) error {
							_, _, err := s.autopay.Push(context.Background(), tx, enrolled[p.enrollment].ID, p.in(t, p.billID))
							return err
						})
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := s.autopay.Pull(context.Background())
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			s.scan(t)
			var bills int
			require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM bills`).Scan(&bills))
			paying, duplicates, charged := s.housingOutcome(t)
			require.Equal(t, 1, charged, "exactly one charge")
			require.Equal(t, 1, paying)
			require.Equal(t, bills-1, duplicates, "every other copy is a duplicate")
		})
	}
}
