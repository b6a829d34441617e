package enrollments

import (
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
)

// Limits on an enrollment and its bills.
const (
	maxDescription   = 500
	maxMetadataKeys  = 50
	maxMetadataKey   = 40
	maxMetadataValue = 500
	maxAmount        = 999_999_999_999
	// refLength is the length of an ELS, an STS and a driving licence.
	refLength = 10
	// billHorizon bounds how far from the service clock a bill's dates
	// may lie: further is a typo.
	billHorizon = 5 * 365 * 24 * time.Hour
)

// New is a request to create an enrollment.
type New struct {
	CustomerID    string
	Kind          Kind
	AccountRef    AccountRef
	Currency      string
	MaxAmount     int64
	PayDay        int // 0: on arrival
	PaymentMethod rebilltype.PaymentMethod
	Description   string
	Metadata      map[string]string
	// ReceiptCustomer is where the 54-FZ receipts of the enrollment's
	// payments are sent; nil: none given.
	ReceiptCustomer *subscriptions.ReceiptCustomer
	// ID, when not nil, is the id the enrollment is created under: one
	// derived from the request (its client and Idempotency-Key), so that
	// the request run again after a database restore forgot it creates
	// the same enrollment, whose bills' charges then carry the gateway
	// keys the gateway already knows. Nil: a new random UUIDv7.
	ID uuid.UUID
}

// Canonical is n with its account written in its one spelling: a housing
// ELS in Cyrillic capitals (see CanonicalELS), an STS and a driving
// licence as CanonicalVehicleDocument writes them. An ELS that is none is
// left as it is, for Validate to refuse.
func (n New) Canonical() New {
	n.AccountRef = n.AccountRef.Canonical()
	return n
}

// Canonical is ref in the spelling rebill stores and matches accounts in.
func (ref AccountRef) Canonical() AccountRef {
	if c, problem := CanonicalELS(ref.ELS); problem == "" {
		ref.ELS = c
	}
	ref.STS = CanonicalVehicleDocument(ref.STS)
	ref.DriverLicense = CanonicalVehicleDocument(ref.DriverLicense)
	return ref
}

// Validate checks an enrollment to create at now, naming every field at
// fault. knownGateway tells whether a payment method may name a gateway.
// Returns nil or rebilltype.Errors.
func (n New) Validate(now time.Time, knownGateway func(string) bool) error {
	var errs rebilltype.Errors
	if !rebilltype.ValidCustomerID(n.CustomerID) {
		errs.Add("customer_id", "must be 1..%d printable ASCII characters, not only spaces", rebilltype.MaxCustomerID)
	}
	switch n.Kind {
	case Housing:
		if _, problem := CanonicalELS(n.AccountRef.ELS); problem != "" {
			errs.Add("account_ref", "%s", problem)
		}
		if n.PayDay != 0 && (n.PayDay < 1 || n.PayDay > 28) {
			errs.Add("pay_day", "must be 1..28")
		}
	case Fines:
		ref := n.AccountRef
		if ref.ELS != "" || (ref.STS == "" && ref.DriverLicense == "") {
			errs.Add("account_ref", `must be an object with "sts" and/or "driver_license"`)
		}
		if ref.STS != "" && !ValidVehicleDocument(ref.STS) {
			errs.Add("account_ref.sts", "must be 10 characters, spaces aside: digits and letters (Cyrillic or Latin), e.g. 77УА123456")
		}
		if ref.DriverLicense != "" && !ValidVehicleDocument(ref.DriverLicense) {
			errs.Add("account_ref.driver_license", "must be 10 characters, spaces aside: digits and letters (Cyrillic or Latin), "+
				"e.g. 7712345678 or 77АВ123456")
		}
		if n.PayDay != 0 {
			errs.Add("pay_day", "applies to housing only: fines are paid on arrival")
		}
	default:
		errs.Add("kind", "must be housing or fines")
	}
	if n.Currency != "RUB" {
		errs.Add("currency", "must be RUB")
	}
	if n.MaxAmount <= 0 || n.MaxAmount > maxAmount {
		errs.Add("max_amount", "must be an integer number of kopecks between 1 and %d", int64(maxAmount))
	}
	if n.PaymentMethod == (rebilltype.PaymentMethod{}) {
		errs.Add("payment_method", "is required")
	} else if fields := (rebilltype.Errors{}); errors.As(n.PaymentMethod.Validate(now, knownGateway), &fields) {
		for _, f := range fields {
			errs.Add("payment_method."+f.Field, "%s", f.Message)
		}
	}
	if n.ReceiptCustomer != nil {
		n.ReceiptCustomer.Validate(&errs, "receipt_customer")
	}
	if utf8.RuneCountInString(n.Description) > maxDescription {
		errs.Add("description", "must be at most %d characters", maxDescription)
	}
	if len(n.Metadata) > maxMetadataKeys {
		errs.Add("metadata", "at most %d keys", maxMetadataKeys)
	}
	for k, v := range n.Metadata {
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKey {
			errs.Add("metadata", "keys must be 1..%d characters", maxMetadataKey)
		}
		if utf8.RuneCountInString(v) > maxMetadataValue {
			errs.Add("metadata."+k, "must be at most %d characters", maxMetadataValue)
		}
	}
	return errs.Err()
}

// ExampleELS is an ELS as GIS ZhKH prints it.
const ExampleELS = "75ДА533315"

// latinTwins are the Latin capitals drawn exactly like a Cyrillic one: an
// ELS typed on a Latin keyboard carries them, and they mean the Cyrillic
// letter.
var latinTwins = map[rune]rune{'A': 'А', 'B': 'В', 'E': 'Е', 'K': 'К', 'M': 'М', 'H': 'Н', 'O': 'О', 'P': 'Р', 'C': 'С',
	'T': 'Т', 'X': 'Х', 'Y': 'У'}

// CanonicalELS returns the single personal account number (ELS) of GIS
// ZhKH that s writes, as GIS ZhKH writes it, or problem saying why s is
// none. An ELS is 10 characters: two digits, two Cyrillic capital letters,
// six digits (GIS ZhKH's coding of identifiers, "ЦЦББЦЦЦЦЦЦ", e.g.
// 75ДА533315, the ELS inside its housing-service identifier
// 75ДА533315-01; open-condo's billing validates the same shape with
// /^\d{2}[А-Я]{2}\d{6}$/i). Letters of either case are read as capitals,
// and a Latin capital drawn exactly like a Cyrillic one (A B E K M H O P C
// T X Y) is read as that Cyrillic letter: the same account always has one
// spelling, so that it cannot be enrolled twice under two. Ё is not taken:
// the issuer's alphabet for the two letters is А..Я.
func CanonicalELS(s string) (canonical string, problem string) {
	const shape = "must be the single personal account number (ELS) of GIS ZhKH: 10 characters, two digits, " +
		"two Cyrillic letters, six digits, e.g. " + ExampleELS
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) != refLength {
		return "", shape
	}
	out := make([]rune, 0, refLength)
	for i, r := range []rune(s) {
		letter := i == 2 || i == 3
		switch {
		case !letter && '0' <= r && r <= '9':
		case !letter:
			return "", shape
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
			twin, ok := latinTwins[unicode.ToUpper(r)]
			if !ok {
				return "", fmt.Sprintf("has the Latin letter %q, which no Cyrillic letter looks like: the letters of an ELS "+
					"are Cyrillic (e.g. %s); the Latin A B E K M H O P C T X Y are read as their Cyrillic twins", r, ExampleELS)
			}
			r = twin
		case 'а' <= r && r <= 'я':
			r = unicode.ToUpper(r)
		case 'А' <= r && r <= 'Я':
		default:
			return "", shape
		}
		out = append(out, r)
	}
	return string(out), ""
}

// ValidELS reports whether s is an ELS as GIS ZhKH writes it (see
// CanonicalELS).
func ValidELS(s string) bool {
	c, problem := CanonicalELS(s)
	return problem == "" && c == s
}

// CanonicalVehicleDocument writes the number of a vehicle registration
// certificate (STS) or a driving licence in its one spelling, so that one
// document is one account however it was typed: without spaces, letters in
// capitals, and, when every letter is Cyrillic or a Latin capital drawn
// exactly like a Cyrillic one (A B E K M H O P C T X Y, latinTwins), all
// in Cyrillic.
//
// Both documents carry the region's two digits, a series and a number: an
// STS "77 УА 123456" (two digits, two letters, six digits; forms with an
// all-digit series exist too, unverified in a primary source), a driving
// licence issued before 1 March 2011 "77 АВ 123456" (the region's code, a
// two-letter series each region sets, a six-digit number: the rules for
// filling in that form, consultant.ru/document/cons_doc_LAW_9329), one
// issued since (MVD order 365 of 13 May 2009, issued from 1 March 2011:
// 1tv.ru/news/social/171810) ten digits, series and number. Their letters
// are Cyrillic; number plates use only the twelve Cyrillic letters drawn
// like Latin ones (zakon-auto.ru/info/svidetelstvo-registraciy-ts.php),
// and a series typed on a Latin keyboard uses the same look-alikes, so a
// Latin twin means its Cyrillic letter: 77YA123456 is 77УА123456. A value
// with a Latin letter that has no Cyrillic twin is no Russian document
// and is kept as it is (ValidVehicleDocument judges it).
func CanonicalVehicleDocument(s string) string {
	if s == "" {
		return s
	}
	out := make([]rune, 0, len(s))
	twins := true
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			continue
		case 'a' <= r && r <= 'z', 'а' <= r && r <= 'я', r == 'ё':
			r = unicode.ToUpper(r)
		}
		if 'A' <= r && r <= 'Z' {
			_, ok := latinTwins[r]
			twins = twins && ok
		}
		out = append(out, r)
	}
	if twins {
		for i, r := range out {
			if twin, ok := latinTwins[r]; ok {
				out[i] = twin
			}
		}
	}
	return string(out)
}

// LatinSpelling is a canonical STS or driving licence number written with
// the Latin twins of its Cyrillic letters, and whether it has one (every
// letter has a twin, and there is at least one letter): the spelling a
// bill source may have filed bills under.
func LatinSpelling(canonical string) (string, bool) {
	out := []rune(canonical)
	letters := 0
	for i, r := range out {
		if '0' <= r && r <= '9' {
			continue
		}
		latin, ok := cyrillicTwins[r]
		if !ok {
			return "", false
		}
		out[i] = latin
		letters++
	}
	return string(out), letters > 0
}

// cyrillicTwins is latinTwins the other way.
var cyrillicTwins = func() map[rune]rune {
	m := make(map[rune]rune, len(latinTwins))
	for latin, cyrillic := range latinTwins {
		m[cyrillic] = latin
	}
	return m
}()

// ValidVehicleDocument reports whether s, canonical (see
// CanonicalVehicleDocument), may be an STS or a driving licence number:
// 10 characters, digits and capital letters, Cyrillic ones too (the series
// of both documents are written in Cyrillic).
func ValidVehicleDocument(s string) bool {
	if utf8.RuneCountInString(s) != refLength || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case '0' <= r && r <= '9', 'A' <= r && r <= 'Z', 'А' <= r && r <= 'Я', r == 'Ё':
		default:
			return false
		}
	}
	return true
}

// ValidUIN reports whether s is a payment identifier (UIN) of GIS GMP: 20
// or 25 digits whose last is the check digit (see UINCheckDigit).
func ValidUIN(s string) bool {
	if len(s) != 20 && len(s) != 25 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return UINCheckDigit(s[:len(s)-1]) == int(s[len(s)-1]-'0')
}

// UINCheckDigit computes the check digit of the digits of a UIN before
// its last. The Treasury's rules for the UIN (the order of the Federal
// Treasury on the GIS GMP, its annex on the structure of the accrual
// identifier) compute it by the control-number methodology of the
// all-Russian classifiers (PR 50.1.024-2005, annex V, the one OKPO uses):
// the digits are weighted with the natural series 1..10, repeated; the
// weighted sum modulo 11 is the digit; a remainder of 10 is computed again
// with "the second series of weights, shifted two places to the left (3,
// 4, 5, ...)" — that same 1..10 series started at its third weight, so 3,
// 4, ..., 10, 1, 2, 3, ... (OKPO's nine-digit body is weighted 3..10, 1 in
// the second pass), not 3..12; 10 once more gives 0.
func UINCheckDigit(body string) int {
	sum := func(shift int) int {
		total := 0
		for i := 0; i < len(body); i++ {
			weight := (i+shift)%10 + 1
			total += int(body[i]-'0') * weight
		}
		return total % 11
	}
	r := sum(0)
	if r == 10 {
		r = sum(2)
	}
	if r == 10 {
		r = 0
	}
	return r
}

// maxIssuerID bounds a housing bill's id, in characters.
const maxIssuerID = 64

// validIssuerID reports whether s may be a housing bill's id: opaque to
// rebill, the issuer's own (letters of any script among them), so only
// printable and short; control characters would corrupt logs and
// paths.
func validIssuerID(s string) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > maxIssuerID {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// BillInput is a bill as an issuer (or the API) sends it.
type BillInput struct {
	BillID           string
	Amount           int64
	IssuedAt         time.Time
	DueDate          Date
	DiscountDeadline *Date
	DiscountedAmount *int64
	// PaymentDocumentID (ИПД), ServiceID (ИЖКУ), Period (YYYY-MM) and
	// Supplier are a housing bill's GIS ZhKH identifiers (housing.go),
	// each optional.
	PaymentDocumentID string
	ServiceID         string
	Period            string
	Supplier          Supplier
}

// Validate checks a bill for an enrollment of kind at now. Returns nil or
// rebilltype.Errors.
func (b BillInput) Validate(kind Kind, now time.Time) error {
	var errs rebilltype.Errors
	switch {
	case kind == Fines && !ValidUIN(b.BillID):
		errs.Add("bill_id", "must be the fine's payment identifier (UIN): 20 or 25 digits with a valid check digit")
	case kind != Fines && (!validIssuerID(b.BillID) || !rebilltype.HasVisible(b.BillID)):
		errs.Add("bill_id", "must be 1..%d printable characters (no control characters), not only spaces", maxIssuerID)
	case b.BillID == "." || b.BillID == "..":
		// A path segment of "." or ".." is removed by proxies and clients
		// (RFC 3986 §5.2.4), so the bill could never be confirmed or withdrawn.
		errs.Add("bill_id", `must not be "." or "..", which no URL can address`)
	}
	if b.Amount <= 0 || b.Amount > maxAmount {
		errs.Add("amount", "must be an integer number of kopecks between 1 and %d", int64(maxAmount))
	}
	if b.IssuedAt.IsZero() {
		errs.Add("issued_at", "is required: an RFC 3339 time")
	} else if b.IssuedAt.After(now.Add(24*time.Hour)) || b.IssuedAt.Before(now.Add(-billHorizon)) {
		errs.Add("issued_at", "must not lie in the future, nor more than 5 years back (now is %s)", now.Format(time.RFC3339))
	}
	if b.DueDate.IsZero() {
		errs.Add("due_date", "is required: a date YYYY-MM-DD")
	} else if !b.IssuedAt.IsZero() && b.DueDate.Before(DateOf(b.IssuedAt)) {
		errs.Add("due_date", "must not be before the day of issued_at")
	} else if b.DueDate.Start().After(now.Add(billHorizon)) {
		errs.Add("due_date", "must be within 5 years")
	}
	switch {
	case (b.DiscountDeadline == nil) != (b.DiscountedAmount == nil):
		errs.Add("discounted_amount", "discounted_amount and discount_deadline come together")
	case b.DiscountDeadline != nil && kind != Fines:
		errs.Add("discount_deadline", "applies to fines only")
	case b.DiscountDeadline != nil:
		if *b.DiscountedAmount <= 0 || *b.DiscountedAmount >= b.Amount {
			errs.Add("discounted_amount", "must be between 1 and amount - 1")
		}
		if b.DiscountDeadline.IsZero() {
			errs.Add("discount_deadline", "must be a date YYYY-MM-DD")
		} else if !b.IssuedAt.IsZero() && b.DiscountDeadline.Before(DateOf(b.IssuedAt)) {
			errs.Add("discount_deadline", "must not be before the day of issued_at")
		} else if !b.DueDate.IsZero() && b.DueDate.Before(*b.DiscountDeadline) {
			errs.Add("discount_deadline", "must not be after due_date")
		}
	}
	b.validateHousing(&errs, kind, now)
	return errs.Err()
}
