package enrollments_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
)

func TestValidUIN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		uin  string
		want bool
	}{
		{"first pass", "18800000000000000008", true},
		{"real fine (first pass)", "18810142200817004923", true},
		{"real fine (first pass)", "18810162210739014395", true},
		{"second pass wraps its weights after 10", "36591361191407039425", true},
		{"second pass wraps its weights after 10", "86249269386098547598", true},
		{"second pass read as weights 3..12", "36591361191407039424", false},
		{"second pass read as weights 3..12", "86249269386098547590", false},
		{"second pass, no weight above 10 reached", "18810000000000000015", true},
		{"both passes give 10: check digit 0", "18848688699474287920", true},
		{"25 digits", "0001111111111111111111114", true},
		{"25 digits, second pass", "1884657376611232301427167", true},
		{"wrong check digit", "18800000000000000009", false},
		{"19 digits", "1880000000000000000", false},
		{"21 digits", "188000000000000000008", false},
		{"a letter", "1880000000000000000A", false},
		{"empty", "", false},
	} {
		require.Equal(t, tc.want, enrollments.ValidUIN(tc.uin), tc.name)
	}
}

// An ELS is two digits, two Cyrillic letters and six digits; Latin
// letters drawn like Cyrillic ones and lower case are read as the
// Cyrillic capital, any other Latin letter is refused saying why.
func TestCanonicalELS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want, problem string
	}{
		{"75ДА533315", "75ДА533315", ""},
		{"75да533315", "75ДА533315", ""},
		{"75KA533315", "75КА533315", "Latin K and A are their Cyrillic twins"},
		{"75ka533315", "75КА533315", ""},
		{"00XY000000", "00ХУ000000", ""},
		{"01AB234567", "01АВ234567", ""},
		{"01MH234567", "01МН234567", ""},
		{"01OP234567", "01ОР234567", ""},
		{"01CT234567", "01СТ234567", ""},
		{"01EK234567", "01ЕК234567", ""},
		{"75DA533315", "", "'D'"},
		{"75ДZ533315", "", "'Z'"},
		{"1234567890", "", "two digits, two Cyrillic letters, six digits"},
		{"12345ABCDE", "", "two digits, two Cyrillic letters"},
		{"75ДА53331", "", "10 characters"},
		{"75ДА5333150", "", "10 characters"},
		{"75ЁА533315", "", "two Cyrillic letters"},
		{"7ДДА533315", "", "two digits"},
		{"", "", "10 characters"},
	} {
		got, problem := enrollments.CanonicalELS(tc.in)
		if tc.want != "" {
			require.Empty(t, problem, tc.in)
			require.Equal(t, tc.want, got, tc.in)
			require.True(t, enrollments.ValidELS(got))
			continue
		}
		require.Contains(t, problem, tc.problem, tc.in)
		require.Empty(t, got, tc.in)
	}

	n := enrollments.New{Kind: enrollments.Housing, AccountRef: enrollments.AccountRef{ELS: "75да533315"}}
	require.Equal(t, "75ДА533315", n.Canonical().AccountRef.ELS)
}

func TestAccountReferences(t *testing.T) {
	t.Parallel()
	require.True(t, enrollments.ValidELS("75ДА533315"), "as GIS ZhKH issues it")
	require.False(t, enrollments.ValidELS("75da533315"), "canonical only in capitals")
	require.False(t, enrollments.ValidELS("12345ABCDE"))
	require.False(t, enrollments.ValidELS("123456789"))

	require.True(t, enrollments.ValidVehicleDocument("77УА123456"), "Cyrillic capitals")
	require.True(t, enrollments.ValidVehicleDocument("7712345678"))
	require.True(t, enrollments.ValidVehicleDocument("77ЁЖ123456"))
	require.False(t, enrollments.ValidVehicleDocument("77уа123456"), "lower case")
	require.False(t, enrollments.ValidVehicleDocument("77УА12345"), "9 characters")
	require.False(t, enrollments.ValidVehicleDocument("77 А123456"))
}

// An STS or a driving licence number has one spelling: spaces dropped,
// capitals, and its letters in Cyrillic when every one is Cyrillic or
// drawn like a Cyrillic one. A number with another Latin letter keeps it.
func TestCanonicalVehicleDocument(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"77УА123456":        "77УА123456",
		"77YA123456":        "77УА123456",
		"77ya123456":        "77УА123456",
		"77уа123456":        "77УА123456",
		"77 УА 123456":      "77УА123456",
		"77\u00a0YA 123456": "77УА123456",
		"77Уa123456":        "77УА123456",
		"77AB654321":        "77АВ654321",
		"7712345678":        "7712345678",
		"77 12 345678":      "7712345678",
		"77ёж123456":        "77ЁЖ123456",
		"ABEKMHOPCT":        "АВЕКМНОРСТ",
		"77DA123456":        "77DA123456",
		"77da123456":        "77DA123456",
		"77DА123456":        "77DА123456",
		"":                  "",
	} {
		got := enrollments.CanonicalVehicleDocument(in)
		require.Equal(t, want, got, "%q", in)
		require.Equal(t, got, enrollments.CanonicalVehicleDocument(got), "canonical twice is canonical: %q", in)
	}
	n := enrollments.New{Kind: enrollments.Fines, AccountRef: enrollments.AccountRef{STS: "77 ya 123456", DriverLicense: "77ab654321"}}
	require.Equal(t, enrollments.AccountRef{STS: "77УА123456", DriverLicense: "77АВ654321"}, n.Canonical().AccountRef)

	for in, want := range map[string]string{"77УА123456": "77YA123456", "77АВ654321": "77AB654321", "АВЕКМНОРСТ": "ABEKMHOPCT"} {
		got, ok := enrollments.LatinSpelling(in)
		require.True(t, ok, in)
		require.Equal(t, want, got)
		require.Equal(t, in, enrollments.CanonicalVehicleDocument(got), "the Latin spelling reads back")
	}
	for _, in := range []string{"7712345678", "77ДА123456", "77DA123456"} {
		_, ok := enrollments.LatinSpelling(in)
		require.False(t, ok, "%q has no other spelling", in)
	}
}

// Every number accepted before numbers had one spelling (10 digits and
// capitals, Latin or Cyrillic, in any mix) is still accepted.
func TestVehicleDocumentsAcceptedBeforeStayAccepted(t *testing.T) {
	t.Parallel()
	alphabet := []rune("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯЁ")
	rng := rand.New(rand.NewPCG(5, 32))
	for range 20_000 {
		s := make([]rune, 10)
		for i := range s {
			s[i] = alphabet[rng.IntN(len(alphabet))]
		}
		require.True(t, enrollments.ValidVehicleDocument(enrollments.CanonicalVehicleDocument(string(s))), "%q", string(s))
	}
}

func TestNewValidateNamesEveryField(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	known := func(string) bool { return true }
	err := enrollments.New{Kind: enrollments.Fines, Currency: "USD", PayDay: 3,
		AccountRef: enrollments.AccountRef{STS: "bad"}}.Validate(now, known)
	var fields rebilltype.Errors
	require.ErrorAs(t, err, &fields)
	var names []string
	for _, f := range fields {
		names = append(names, f.Field)
	}
	require.ElementsMatch(t, []string{"customer_id", "account_ref.sts", "pay_day", "currency", "max_amount", "payment_method"}, names)

	ok := enrollments.New{CustomerID: "c", Kind: enrollments.Housing, AccountRef: enrollments.AccountRef{ELS: "75ДА533315"},
		Currency: "RUB", MaxAmount: 1, PayDay: 28,
		PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 1, ExpYear: 2030}}
	require.NoError(t, ok.Validate(now, known))

	ok.ReceiptCustomer = &subscriptions.ReceiptCustomer{Phone: "79001234567"}
	require.NoError(t, ok.Validate(now, known))
	for contact, field := range map[subscriptions.ReceiptCustomer]string{
		{}:                      "receipt_customer",
		{Email: "anna at home"}: "receipt_customer.email",
		{Phone: "8 900 123-45"}: "receipt_customer.phone",
	} {
		bad := ok
		bad.ReceiptCustomer = &contact
		require.ErrorAs(t, bad.Validate(now, known), &fields)
		require.Equal(t, field, fields[0].Field)
	}
}

func date(t *testing.T, s string) enrollments.Date {
	t.Helper()
	d, err := enrollments.ParseDate(s)
	require.NoError(t, err)
	return d
}

func TestPlanBill(t *testing.T) {
	t.Parallel()
	rules := enrollments.Rules{Dunning: []time.Duration{24 * time.Hour, 72 * time.Hour, 120 * time.Hour, 168 * time.Hour},
		CaptureMargin: time.Hour}
	arrival := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC) // 12:00 in Moscow
	bill := enrollments.BillInput{Amount: 1000, IssuedAt: arrival, DueDate: date(t, "2027-03-25")}
	for _, tc := range []struct {
		name   string
		payDay int
		due    string
		want   time.Time
	}{
		{"no pay day: on arrival", 0, "2027-03-25", arrival},
		{"pay day later this month", 10, "2027-03-25", time.Date(2027, 3, 9, 21, 0, 0, 0, time.UTC)},
		{"pay day today: on arrival", 1, "2027-03-25", arrival},
		{"pay day passed: next month", 28, "2027-04-30", time.Date(2027, 3, 27, 21, 0, 0, 0, time.UTC)},
		{"pay day inside the dunning room: the due end less the room", 10, "2027-03-15", time.Date(2027, 3, 8, 21, 0, 0, 0, time.UTC)},
		{"arrival inside the dunning room: on arrival", 10, "2027-03-05", arrival},
		{"pay day exactly the dunning room before the due end", 9, "2027-03-15", time.Date(2027, 3, 8, 21, 0, 0, 0, time.UTC)},
	} {
		b := bill
		b.DueDate = date(t, tc.due)
		plan := rules.PlanBill(enrollments.Housing, tc.payDay, b, arrival)
		require.Equal(t, tc.want, plan.PayAt, tc.name)
		require.Equal(t, b.DueDate.End(), plan.ExpiresAt, tc.name)
	}

	require.Equal(t, time.Date(2027, 3, 25, 20, 0, 0, 0, time.UTC), rules.LastStart(date(t, "2027-03-25").End()),
		"no attempt starts in the last hour of the last payable day")

	deadline := date(t, "2027-03-20")
	discounted := int64(500)
	issued := time.Date(2027, 2, 28, 10, 0, 0, 0, time.UTC)
	fine := enrollments.BillInput{Amount: 1000, IssuedAt: issued, DueDate: date(t, "2027-03-30"), DiscountDeadline: &deadline,
		DiscountedAmount: &discounted}
	plan := rules.PlanBill(enrollments.Fines, 0, fine, arrival)
	require.Equal(t, arrival, plan.PayAt, "fines are paid on arrival")
	require.Equal(t, time.Date(2027, 3, 20, 21, 0, 0, 0, time.UTC), *plan.DiscountEnds, "the end of the deadline in Moscow")
	require.Equal(t, time.Date(2027, 4, 29, 21, 0, 0, 0, time.UTC), plan.ExpiresAt, "60 days after the ruling, later than the due date")
	lastDiscounted := plan.DiscountEnds.Add(-registry.DiscountMargin)
	require.EqualValues(t, 500, enrollments.AmountDue(1000, &discounted, plan.DiscountEnds, lastDiscounted.Add(-time.Microsecond)),
		"an attempt that starts before its last discounted start is at the discount")
	require.EqualValues(t, 1000, enrollments.AmountDue(1000, &discounted, plan.DiscountEnds, lastDiscounted),
		"one that starts later could not be posted and captured in time: the full amount")
	require.EqualValues(t, 1000, enrollments.AmountDue(1000, &discounted, plan.DiscountEnds, *plan.DiscountEnds))
}

func TestNextAttemptFitsDunningBeforeTheDeadlines(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	rules := enrollments.Rules{Dunning: []time.Duration{day, 3 * day, 5 * day, 7 * day}, CaptureMargin: time.Hour}
	first := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	ends := first.Add(71 * time.Hour) // 70 hours of room before the margin
	expires := first.Add(60 * day)
	times := []time.Time{first}

	// Discounted attempts: the 7-day schedule squeezed into 70 hours.
	at, ok := rules.NextAttempt(1, times, first, &ends, expires)
	require.True(t, ok)
	require.Equal(t, first.Add(10*time.Hour), at, "1 day of 7, scaled to 70 hours")
	at, _ = rules.NextAttempt(4, []time.Time{first, first, first, first}, first, &ends, expires)
	require.Equal(t, first.Add(70*time.Hour), at, "the last retry an hour before the deadline")
	at, ok = rules.NextAttempt(5, []time.Time{first, first, first, first, first}, first, &ends, expires)
	require.True(t, ok)
	require.Equal(t, ends, at, "schedule exhausted: the next attempt at the deadline, at the full amount")

	// Full-amount attempts: the schedule again, from the deadline.
	full := []time.Time{first, first, first, first, first, ends}
	at, _ = rules.NextAttempt(6, full, first, &ends, expires)
	require.Equal(t, ends.Add(day), at)
	at, _ = rules.NextAttempt(9, append(full, ends, ends, ends), first, &ends, expires)
	require.Equal(t, ends.Add(7*day), at, "the fourth full-amount retry")
	_, ok = rules.NextAttempt(10, append(full, ends, ends, ends, ends), first, &ends, expires)
	require.False(t, ok, "the full-amount schedule is exhausted")

	// A bill without a discount: the plain schedule, never past its expiry.
	at, ok = rules.NextAttempt(2, times, first, nil, expires)
	require.True(t, ok)
	require.Equal(t, first.Add(3*day), at)
	_, ok = rules.NextAttempt(2, times, first, nil, first.Add(3*day))
	require.False(t, ok, "a retry after the last payable moment is not made")
}
