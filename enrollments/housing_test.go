package enrollments_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
)

func TestCanonicalPaymentDocumentID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"75ДА533315-01-6011", "75ДА533315-01-6011"},
		{"75да533315-01-6011", "75ДА533315-01-6011"},
		{"75ДA533315-01-6011", "75ДА533315-01-6011"}, // a Latin twin read as Cyrillic
		{"75DA533315-01-6011", ""},                   // D has no Cyrillic twin
		{"75ДА533315-01-60a1", "75ДА533315-01-60А1"},
		{"75ДА533315-01-601", ""},   // 17 characters
		{"75ДА533315-01-60111", ""}, // 19
		{"7ДА5333150-01-6011", ""},  // no ELS first
		{"75ДА533315 01 6011", ""},  // spaces
		{"75ДА533315-01-60_1", ""},  // not a digit, letter or "-"
		{"75DZ533315-01-6011", ""},  // Z has no Cyrillic twin
		{"", ""},
	} {
		got, problem := enrollments.CanonicalPaymentDocumentID(tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
		require.Equal(t, tc.want == "", problem != "", "%q: %s", tc.in, problem)
	}
}

func TestCanonicalServiceID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"75ДА533315-01", "75ДА533315-01"},
		{"75дa533315-01", "75ДА533315-01"},
		{"75da533315-01", ""},
		{"75ДА533315-1", ""},
		{"75ДА533315-001", ""},
		{"75ДА533315_01", ""},
		{"75ДА533315-0A", ""},
		{"75ДА53331-01", ""},
	} {
		got, problem := enrollments.CanonicalServiceID(tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
		require.Equal(t, tc.want == "", problem != "", "%q: %s", tc.in, problem)
	}
}

func TestValidINNAndKPP(t *testing.T) {
	t.Parallel()
	for inn, valid := range map[string]bool{
		"7743013901":   true,
		"7743013902":   false,
		"500100732259": true,
		"500100732258": false,
		"500100732249": false,
		"774301390":    false,
		"77430139020":  false,
		"77430139O2":   false,
	} {
		require.Equal(t, valid, enrollments.ValidINN(inn), inn)
	}
	for kpp, valid := range map[string]bool{
		"773601001":  true,
		"7736AB001":  true,
		"7736ab001":  false,
		"773601A01":  false,
		"77360100":   false,
		"7736010011": false,
	} {
		require.Equal(t, valid, enrollments.ValidKPP(kpp), kpp)
	}
}

// Each identifier that does not fit is refused naming its field and
// saying why; a bill without them is valid, and a fine carries none.
func TestHousingIdentifiersAreValidatedWhenPresent(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	account := enrollments.AccountRef{ELS: "75ДА533315"}
	base := enrollments.BillInput{BillID: "H-1", Amount: 1000, IssuedAt: now, DueDate: date(t, "2027-03-25")}
	require.NoError(t, base.ValidateFor(enrollments.Housing, account, now), "no identifiers: valid")
	full := base
	full.PaymentDocumentID, full.ServiceID, full.Period = "75ДА533315-01-6011", "75ДА533315-01", "2027-02"
	full.Supplier = enrollments.Supplier{INN: "7743013901", KPP: "773601001", Name: "ООО «УК Дом»"}
	require.NoError(t, full.ValidateFor(enrollments.Housing, account, now))
	ie := full
	ie.Supplier = enrollments.Supplier{INN: "500100732259"}
	require.NoError(t, ie.ValidateFor(enrollments.Housing, account, now))

	for _, tc := range []struct {
		name   string
		change func(*enrollments.BillInput)
		field  string
		why    string
	}{
		{"ИПД too short", func(b *enrollments.BillInput) { b.PaymentDocumentID = "75ДА533315-01" }, "payment_document_id", "18 characters"},
		{"ИПД without an ELS", func(b *enrollments.BillInput) { b.PaymentDocumentID = "123456789012345678" }, "payment_document_id", "ELS"},
		{"ИЖКУ malformed", func(b *enrollments.BillInput) { b.ServiceID = "75ДА533315/01" }, "service_id", "two digits"},
		{"ИЖКУ of another account", func(b *enrollments.BillInput) { b.ServiceID = "77АБ000001-01" }, "service_id", "account 75ДА533315"},
		{"period not a month", func(b *enrollments.BillInput) { b.Period = "2027-13" }, "period", "YYYY-MM"},
		{"period a date", func(b *enrollments.BillInput) { b.Period = "2027-02-01" }, "period", "YYYY-MM"},
		{"period far away", func(b *enrollments.BillInput) { b.Period = "2040-01" }, "period", "5 years"},
		{"INN check digit", func(b *enrollments.BillInput) { b.Supplier.INN = "7743013902" }, "supplier_inn", "check digits"},
		{"INN length", func(b *enrollments.BillInput) { b.Supplier.INN = "77430139" }, "supplier_inn", "10 digits"},
		{"KPP malformed", func(b *enrollments.BillInput) { b.Supplier.KPP = "77360100A" }, "supplier_kpp", "9 characters"},
		{"KPP without INN", func(b *enrollments.BillInput) { b.Supplier.INN = "" }, "supplier_kpp", "supplier_inn"},
		{"KPP of an entrepreneur", func(b *enrollments.BillInput) { b.Supplier.INN = "500100732259" }, "supplier_kpp", "no KPP"},
		{"name only spaces", func(b *enrollments.BillInput) { b.Supplier.Name = "   " }, "supplier_name", "printable"},
		{"name with a control character", func(b *enrollments.BillInput) { b.Supplier.Name = "УК\x07" }, "supplier_name", "printable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := full
			tc.change(&in)
			var fields rebilltype.Errors
			require.ErrorAs(t, in.Canonical().ValidateFor(enrollments.Housing, account, now), &fields)
			require.Len(t, fields, 1, "%v", fields)
			require.Equal(t, tc.field, fields[0].Field)
			require.Contains(t, fields[0].Message, tc.why)
		})
	}

	var fields rebilltype.Errors
	fine := full
	fine.BillID = "18800000000000000004" + ""
	require.ErrorAs(t, fine.Validate(enrollments.Fines, now), &fields)
	var names []string
	for _, f := range fields {
		names = append(names, f.Field)
	}
	require.Subset(t, names, []string{"payment_document_id", "service_id", "period", "supplier_inn", "supplier_kpp", "supplier_name"},
		"a fine carries no housing identifiers")
}
