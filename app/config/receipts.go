package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// BillReceipts is who sends the 54-FZ receipts of bill payments, and what
// rebill's carry when it sends them (REBILL_BILL_RECEIPTS and the
// REBILL_BILL_RECEIPT_* settings).
type BillReceipts struct {
	// ByRebill are the kinds of bill ("housing", "fines") whose receipts
	// rebill sends; the others are left to the gateway's own
	// fiscalisation.
	ByRebill map[string]bool
	// AgentType is the operator's agent type, in YooKassa's names.
	AgentType     string
	VATCode       int
	TaxSystemCode int
	// PaymentSubjects is each kind's payment subject (54-FZ tag 1212).
	PaymentSubjects map[string]string
	// Suppliers is each kind's supplier for bills that name none.
	Suppliers map[string]Supplier
}

// Supplier is on whose behalf a kind's bills are paid.
type Supplier struct {
	Name, INN, Phone string
}

// Who sends a kind's receipts.
const (
	ReceiptsByRebill  = "rebill"
	ReceiptsByGateway = "gateway"
)

// billKinds are the kinds of bill, in the order settings list them.
var billKinds = []string{"housing", "fines"}

// agentTypes are YooKassa's agent types (items[].agent_type), the values
// of 54-FZ's tag 1222.
var agentTypes = []string{"banking_payment_agent", "banking_payment_subagent", "payment_agent", "payment_subagent",
	"attorney", "commissioner", "agent"}

var (
	// innPattern is a legal entity's INN (10 digits) or a person's (12).
	innPattern = regexp.MustCompile(`^([0-9]{10}|[0-9]{12})$`)
	// supplierPhonePattern is an E.164 number, country code first.
	supplierPhonePattern = regexp.MustCompile(`^\+?[1-9][0-9]{9,14}$`)
	// subjectPattern is a payment subject's name in YooKassa's table.
	subjectPattern = regexp.MustCompile(`^[a-z][a-z_]{0,63}$`)
)

// parseKindPairs reads "housing=x,fines=y", each kind at most once, each
// value checked by valid.
func parseKindPairs(v string, valid func(string) error) (map[string]string, error) {
	out := map[string]string{}
	for pair := range strings.SplitSeq(v, ",") {
		kind, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want kind=value pairs, comma separated, e.g. housing=rebill,fines=gateway", pair)
		case !slices.Contains(billKinds, kind):
			return nil, fmt.Errorf("%q: the kind must be housing or fines", kind)
		case out[kind] != "":
			return nil, fmt.Errorf("%s is named twice", kind)
		}
		if err := valid(value); err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		out[kind] = value
	}
	return out, nil
}

func setBillReceipts(c *Config, v string) error {
	by, err := parseKindPairs(v, func(who string) error {
		if who != ReceiptsByRebill && who != ReceiptsByGateway {
			return errors.New("want rebill or gateway")
		}
		return nil
	})
	if err != nil {
		return err
	}
	for kind, who := range by {
		c.BillReceipts.ByRebill[kind] = who == ReceiptsByRebill
	}
	return nil
}

func setPaymentSubjects(c *Config, v string) error {
	subjects, err := parseKindPairs(v, func(s string) error {
		if !subjectPattern.MatchString(s) {
			return errors.New("want a payment subject such as service or payment")
		}
		return nil
	})
	if err != nil {
		return err
	}
	for kind, s := range subjects {
		c.BillReceipts.PaymentSubjects[kind] = s
	}
	return nil
}

// parseSupplier reads "inn=...;phone=...;name=...": name last, as it may
// hold any character but a semicolon.
func parseSupplier(v string) (Supplier, error) {
	var s Supplier
	for field := range strings.SplitSeq(v, ";") {
		key, value, ok := strings.Cut(strings.TrimSpace(field), "=")
		value = strings.TrimSpace(value)
		switch {
		case !ok:
			return Supplier{}, fmt.Errorf("%q: want fields as inn=7701234567;phone=74951234567;name=ООО УК Дом", field)
		case key == "inn" && innPattern.MatchString(value):
			s.INN = value
		case key == "inn":
			return Supplier{}, errors.New("inn: want 10 digits (an organisation) or 12 (a person)")
		case key == "phone" && supplierPhonePattern.MatchString(value):
			s.Phone = value
		case key == "phone":
			return Supplier{}, errors.New("phone: want an E.164 number, country code first, e.g. 74951234567")
		case key == "name" && value != "" && len([]rune(value)) <= 256:
			s.Name = value
		case key == "name":
			return Supplier{}, errors.New("name: want 1..256 characters")
		default:
			return Supplier{}, fmt.Errorf("%q: unknown field (inn, phone, name)", key)
		}
	}
	if s.INN == "" || s.Phone == "" || s.Name == "" {
		return Supplier{}, errors.New("want all of inn, phone and name (54-FZ tags 1226, 1171, 1225)")
	}
	return s, nil
}

func supplierSetter(kind string) func(*Config, string) error {
	return func(c *Config, v string) error {
		s, err := parseSupplier(v)
		if err != nil {
			return err
		}
		c.BillReceipts.Suppliers[kind] = s
		return nil
	}
}

func setAgentType(c *Config, v string) error {
	if !slices.Contains(agentTypes, v) {
		return fmt.Errorf("want one of %s", strings.Join(agentTypes, ", "))
	}
	c.BillReceipts.AgentType = v
	return nil
}

func codeSetter(field func(*Config) *int, lo, hi int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want %d..%d", lo, hi)
		}
		*field(c) = n
		return nil
	}
}

// checkBillReceipts refuses a start where rebill would send a kind's
// receipts without what 54-FZ requires on them, naming the setting.
func checkBillReceipts(r BillReceipts) error {
	var errs []error
	for _, kind := range billKinds {
		if !r.ByRebill[kind] {
			continue
		}
		if r.AgentType == "" {
			errs = append(errs, fmt.Errorf("REBILL_BILL_RECEIPTS sends %s receipts: set REBILL_BILL_RECEIPT_AGENT_TYPE (one of %s)",
				kind, strings.Join(agentTypes, ", ")))
		}
		if _, ok := r.Suppliers[kind]; !ok {
			errs = append(errs, fmt.Errorf("REBILL_BILL_RECEIPTS sends %s receipts: set REBILL_BILL_RECEIPT_SUPPLIER_%s "+
				"(inn=...;phone=...;name=..., the supplier the receipts name)", kind, strings.ToUpper(kind)))
		}
	}
	return errors.Join(errs...)
}
