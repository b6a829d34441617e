package enrollments

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rebill/rebill/rebilltype"
)

// The identifiers GIS ZhKH gives a housing bill, as payers and banks
// write them, and the supplier it is paid to. Sources:
//
//   - The order of Minkomsvyaz No. 589 / Minstroy No. 944/pr of 28.12.2015
//     sets what identifies a housing payment for GIS ZhKH; banks passed it
//     on to payers: the supplier's INN and KPP, and one of the payment
//     identifiers (kmbank.ru/about/news/news_4.html, 21.09.2016); the
//     payment document identifier (ИПД) and/or the personal account with
//     the period paid, month and year (cbkg.ru, "Изменение порядка
//     оформления платежей за жилое помещение и жилищно-коммунальные
//     услуги", 01.07.2016). The Bank of Russia's letter of 22.02.2018
//     N ИН-04-45/12 (garant.ru/hotlaw/federal/1184774) recommends the same
//     details in the payment's purpose.
//   - ИЖКУ: the ELS, "-", and the two-digit number of the service,
//     "ЦЦББЦЦЦЦЦЦ-ЦЦ", e.g. 75ДА533315-01 (GIS ZhKH's coding of the
//     identifiers, quoted at ow5.ru, "Идентификатор жилищно-коммунальных
//     услуг").
//   - ИПД: 18 characters, the first 10 the ELS (128gb.ru, "Платёжные
//     реквизиты: всё, что вы хотели знать про идентификаторы", a secondary
//     source). What characters 11 to 18 are (that page calls 11-13 the
//     service and 14-18 the payment's number) is unverified in a primary
//     source: they are only required to be digits, letters or "-".
//   - The GIS ZhKH integration schemas carry the same fields:
//     PaymentDocumentID (bills-base), ServiceID (account-base), Year and
//     Month (base).
//   - INN: 10 digits for an organisation, 12 for an individual
//     entrepreneur, with check digits (a bank's published rules,
//     developers.tochka.com/docs/cyclops/validation). KPP: 9 characters,
//     four digits (the tax office), two digits or capital Latin letters
//     (the reason), three digits; only an organisation has one.

// Lengths of a housing bill's GIS ZhKH identifiers.
const (
	paymentDocumentLength = 18
	serviceIDLength       = refLength + 3
	maxSupplierName       = 255
)

// ExamplePaymentDocumentID and ExampleServiceID are written as payers
// see them (the ИПД's tail is made up: see the sources above).
const (
	ExamplePaymentDocumentID = ExampleELS + "-01-6011"
	ExampleServiceID         = ExampleELS + "-01"
)

// Supplier is who a housing bill is paid to.
type Supplier struct {
	INN  string
	KPP  string
	Name string
}

// canonicalLetters writes s in capitals, a Latin capital drawn exactly
// like a Cyrillic one read as that Cyrillic letter (as CanonicalELS
// reads an ELS), or returns s as it is when a letter has no such twin.
func canonicalLetters(s string) string {
	out := []rune(s)
	for i, r := range out {
		switch {
		case 'a' <= r && r <= 'z', 'а' <= r && r <= 'я':
			out[i] = unicode.ToUpper(r)
		}
		if twin, ok := latinTwins[out[i]]; ok {
			out[i] = twin
		}
	}
	return string(out)
}

// CanonicalPaymentDocumentID returns the payment document identifier
// (ИПД) s writes, in the spelling of CanonicalELS, or problem saying why
// s is none.
func CanonicalPaymentDocumentID(s string) (canonical string, problem string) {
	shape := fmt.Sprintf("must be the payment document identifier (ИПД) of GIS ZhKH: %d characters, the first 10 the ELS "+
		"(two digits, two Cyrillic letters, six digits), then digits, letters or \"-\", e.g. %s", paymentDocumentLength,
		ExamplePaymentDocumentID)
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) != paymentDocumentLength {
		return "", shape
	}
	runes := []rune(s)
	els, problem := CanonicalELS(string(runes[:refLength]))
	if problem != "" {
		return "", shape
	}
	tail := []rune(canonicalLetters(string(runes[refLength:])))
	for _, r := range tail {
		switch {
		case '0' <= r && r <= '9', r == '-', 'А' <= r && r <= 'Я', 'A' <= r && r <= 'Z':
		default:
			return "", shape
		}
	}
	return els + string(tail), ""
}

// CanonicalServiceID returns the housing-and-utility service identifier
// (ИЖКУ) s writes, its ELS in the spelling of CanonicalELS, or problem
// saying why s is none.
func CanonicalServiceID(s string) (canonical string, problem string) {
	shape := "must be the housing-and-utility service identifier (ИЖКУ) of GIS ZhKH: the ELS, \"-\" and the service's " +
		"two digits, e.g. " + ExampleServiceID
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) != serviceIDLength {
		return "", shape
	}
	runes := []rune(s)
	els, problem := CanonicalELS(string(runes[:refLength]))
	if problem != "" || runes[refLength] != '-' || !isDigits(string(runes[refLength+1:])) {
		return "", shape
	}
	return els + string(runes[refLength:]), ""
}

// ParsePeriod reads the month a housing bill bills, written YYYY-MM.
func ParsePeriod(s string) (time.Time, error) {
	t, err := time.Parse("2006-01", s)
	if err != nil || len(s) != len("2006-01") {
		return time.Time{}, fmt.Errorf("period %q: not YYYY-MM", s)
	}
	return t, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// innWeights are the weights of an INN's check digits: for a 10-digit
// INN the one check digit takes the last nine of the first list; for a
// 12-digit INN the 11th digit takes innWeights[1] (ten), the 12th
// innWeights[0] (eleven). Each check digit is the weighted sum modulo 11,
// modulo 10.
var innWeights = [2][]int{{3, 7, 2, 4, 10, 3, 5, 9, 4, 6, 8}, {7, 2, 4, 10, 3, 5, 9, 4, 6, 8}}

func innCheck(digits string, weights []int) byte {
	sum := 0
	for i, w := range weights {
		sum += int(digits[i]-'0') * w
	}
	return byte(sum%11%10) + '0'
}

// ValidINN reports whether s is a taxpayer number: 10 digits (an
// organisation) or 12 (an individual entrepreneur) with valid check
// digits.
func ValidINN(s string) bool {
	switch {
	case !isDigits(s):
		return false
	case len(s) == 10:
		return innCheck(s, innWeights[0][2:]) == s[9]
	case len(s) == 12:
		return innCheck(s, innWeights[1]) == s[10] && innCheck(s, innWeights[0]) == s[11]
	}
	return false
}

// ValidKPP reports whether s is a tax registration reason code: four
// digits, two digits or capital Latin letters, three digits.
func ValidKPP(s string) bool {
	if len(s) != 9 || !isDigits(s[:4]) || !isDigits(s[6:]) {
		return false
	}
	for i := 4; i < 6; i++ {
		if !('0' <= s[i] && s[i] <= '9') && !('A' <= s[i] && s[i] <= 'Z') {
			return false
		}
	}
	return true
}

// Canonical is b with its GIS ZhKH identifiers in their one spelling
// (those that are none are left for Validate to refuse), so that one
// payment document is one identity however it was typed.
func (b BillInput) Canonical() BillInput {
	if c, problem := CanonicalPaymentDocumentID(b.PaymentDocumentID); problem == "" {
		b.PaymentDocumentID = c
	}
	if c, problem := CanonicalServiceID(b.ServiceID); problem == "" {
		b.ServiceID = c
	}
	b.Supplier.INN, b.Supplier.KPP = strings.TrimSpace(b.Supplier.INN), strings.ToUpper(strings.TrimSpace(b.Supplier.KPP))
	return b
}

// validateHousing adds to errs what is wrong with b's GIS ZhKH
// identifiers and supplier, for an enrollment of kind at now. None is
// required: a bill without them is paid as before.
func (b BillInput) validateHousing(errs *rebilltype.Errors, kind Kind, now time.Time) {
	if kind != Housing {
		for field, v := range map[string]string{"payment_document_id": b.PaymentDocumentID, "service_id": b.ServiceID,
			"period": b.Period, "supplier_inn": b.Supplier.INN, "supplier_kpp": b.Supplier.KPP, "supplier_name": b.Supplier.Name} {
			if v != "" {
				errs.Add(field, "applies to housing bills only")
			}
		}
		return
	}
	if b.PaymentDocumentID != "" {
		if _, problem := CanonicalPaymentDocumentID(b.PaymentDocumentID); problem != "" {
			errs.Add("payment_document_id", "%s", problem)
		}
	}
	if b.ServiceID != "" {
		if _, problem := CanonicalServiceID(b.ServiceID); problem != "" {
			errs.Add("service_id", "%s", problem)
		}
	}
	if b.Period != "" {
		p, err := ParsePeriod(b.Period)
		switch {
		case err != nil:
			errs.Add("period", "must be the month billed, YYYY-MM, e.g. 2026-11")
		case p.After(now.Add(billHorizon)) || p.AddDate(0, 1, 0).Before(now.Add(-billHorizon)):
			errs.Add("period", "must lie within 5 years of now (now is %s)", now.Format("2006-01"))
		}
	}
	inn := b.Supplier.INN
	if inn != "" && !ValidINN(inn) {
		errs.Add("supplier_inn", "must be the supplier's INN: 10 digits (an organisation) or 12 (an individual "+
			"entrepreneur) whose check digits agree")
	}
	switch kpp := b.Supplier.KPP; {
	case kpp == "":
	case inn == "":
		errs.Add("supplier_kpp", "comes with supplier_inn")
	case !ValidKPP(kpp):
		errs.Add("supplier_kpp", "must be the supplier's KPP: 9 characters, four digits, two digits or capital Latin "+
			"letters, three digits, e.g. 773601001")
	case len(inn) == 12:
		errs.Add("supplier_kpp", "must be left out for a 12-digit INN: an individual entrepreneur has no KPP")
	}
	if name := b.Supplier.Name; name != "" && (!validPrintable(name, maxSupplierName) || !rebilltype.HasVisible(name)) {
		errs.Add("supplier_name", "must be 1..%d printable characters, not only spaces", maxSupplierName)
	}
}

// validPrintable reports whether s is valid UTF-8 of at most max printable
// characters.
func validPrintable(s string, max int) bool {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// ValidateFor checks a bill for an enrollment of kind whose account is
// ref, at now: Validate, and that a housing bill's ИЖКУ is a service of
// the enrollment's account (an ИЖКУ begins with the ELS it belongs to;
// another account's service would be another payer's bill). The ИПД's
// first ten characters are not held to the account: that they are the ELS
// rests on a secondary source (see the sources above). Returns nil or
// rebilltype.Errors.
func (b BillInput) ValidateFor(kind Kind, ref AccountRef, now time.Time) error {
	var errs rebilltype.Errors
	if err := b.Validate(kind, now); err != nil && !errors.As(err, &errs) {
		return err
	}
	if kind == Housing && b.ServiceID != "" && ref.ELS != "" {
		if c, problem := CanonicalServiceID(b.ServiceID); problem == "" && !strings.HasPrefix(c, ref.ELS+"-") {
			errs.Add("service_id", "must be a service of the enrollment's account %s: an ИЖКУ begins with its ELS, e.g. %s-01",
				ref.ELS, ref.ELS)
		}
	}
	return errs.Err()
}
