package soak

import (
	"fmt"
	"strconv"
	"strings"
)

// Autopay step kinds: enrollments (housing bills, traffic fines), their
// bills, and the state payment registry's faults.
const (
	KindEnrol         = "enrol"          // create enrollment Enr (Customer, EnrKind, Account, MaxAmount, Card)
	KindBill          = "bill"           // a bill for Enr's account: pushed to Enr, or published to the dev bill source (Pull)
	KindWithdraw      = "withdraw"       // the issuer withdraws bill BillID of Enr
	KindEnrolAction   = "enrol-action"   // Action pause, resume, cancel or confirm (bill BillID) on Enr
	KindEnrolCard     = "enrol-card"     // give Enr the payment method Card
	KindRegistryFault = "registry-fault" // the registry gateway Gateway goes Down or comes back
)

// AutopayStep is the part of a Step about autopay.
type AutopayStep struct {
	Enr       int    `json:"enr,omitempty"`
	Customer  string `json:"customer,omitempty"`
	EnrKind   string `json:"enr_kind,omitempty"` // housing or fines
	Account   string `json:"account,omitempty"`  // the ELS, or the STS of a car
	MaxAmount int64  `json:"max_amount,omitempty"`

	BillID     string `json:"bill_id,omitempty"`
	BillAmount int64  `json:"bill_amount,omitempty"`
	Discounted int64  `json:"discounted,omitempty"`  // a fine's discounted price (0: none)
	DiscountIn int    `json:"discount_in,omitempty"` // days from now to the discount deadline
	DueIn      int    `json:"due_in,omitempty"`      // days from now to the due date (negative: overdue)
	Pull       bool   `json:"pull,omitempty"`        // published to the dev bill source, not pushed
	IssuedAgo  int    `json:"issued_ago,omitempty"`  // days since the bill (ruling) was issued
}

type genEnrollment struct {
	kind, account string
	bills         []string
}

// UIN returns a 20-digit fine payment identifier built from n whose check
// digit the first pass of weights 1..10 settles (a remainder below 10):
// valid under every reading of the second pass.
func UIN(n uint64) string {
	for k := uint64(0); ; k++ {
		body := "188101" + fmt.Sprintf("%013d", (n*7919+k)%1e13)
		sum := 0
		for i := 0; i < len(body); i++ {
			sum += int(body[i]-'0') * (1 + i%10)
		}
		if r := sum % 11; r < 10 {
			return body + strconv.Itoa(r)
		}
	}
}

// ELS returns a housing account number valid both as 10 digits and Latin
// capitals and as two digits, two Cyrillic letters (written with their
// Latin look-alikes, which rebill may store in Cyrillic) and six digits.
func ELS(n int) string {
	letters := "ABEKMHOPCTXY"
	return fmt.Sprintf("%02d%c%c%06d", 10+n%90, letters[n%len(letters)], letters[(n/7)%len(letters)], (n*7919)%1000000)
}

// STS returns a vehicle registration certificate number.
func STS(n int) string { return fmt.Sprintf("77УА%06d", n) }

// autopay chooses an autopay step, or returns s unchanged (Kind "") when
// none fits.
func (g *Generator) autopay(s Step) Step {
	r := g.rng.Float64() * 100
	switch {
	case len(g.enrs) < 2 || (r < 18 && len(g.enrs) < g.cfg.MaxEnrollments):
		return g.enrol(s)
	case r < 55:
		return g.bill(s)
	case r < 62:
		s.Kind, s.Enr = KindWithdraw, 1+g.rng.IntN(len(g.enrs))
		if bills := g.enrs[s.Enr-1].bills; len(bills) > 0 {
			s.BillID = bills[g.rng.IntN(len(bills))]
			return s
		}
		return Step{}
	case r < 75:
		s.Kind, s.Enr = KindEnrolAction, 1+g.rng.IntN(len(g.enrs))
		s.Action = []string{"pause", "resume", "resume", "cancel", "confirm", "confirm"}[g.rng.IntN(6)]
		if s.Action == "cancel" && !g.chance(0.3) {
			s.Action = "pause"
		}
		if bills := g.enrs[s.Enr-1].bills; s.Action == "confirm" {
			if len(bills) == 0 {
				return Step{}
			}
			s.BillID = bills[g.rng.IntN(len(bills))]
		}
		return s
	case r < 88:
		s.Kind, s.Enr = KindEnrolCard, 1+g.rng.IntN(len(g.enrs))
		c := g.card(g.chance(0.6))
		s.Card = &c
		return s
	default:
		s.Kind = KindRegistryFault
		s.Gateway = fmt.Sprintf("gmp%d", 1+g.rng.IntN(2))
		down := !g.regDown[s.Gateway] && g.chance(0.7)
		g.regDown[s.Gateway] = down
		s.Down = &down
		return s
	}
}

func (g *Generator) enrol(s Step) Step {
	s.Kind = KindEnrol
	e := genEnrollment{kind: "housing"}
	if g.chance(0.5) {
		e.kind = "fines"
	}
	// A third of enrollments enrol an account already enrolled: by the
	// same customer or by another.
	var same []int
	for i, o := range g.enrs {
		if o.kind == e.kind {
			same = append(same, i)
		}
	}
	s.Customer = fmt.Sprintf("payer-%d", 1+len(g.enrs))
	if len(same) > 0 && g.chance(0.35) {
		i := same[g.rng.IntN(len(same))]
		e.account = g.enrs[i].account
		if g.chance(0.5) {
			s.Customer = fmt.Sprintf("payer-%d", 1+i)
		}
	} else if e.kind == "housing" {
		e.account = ELS(1 + len(g.enrs))
	} else {
		e.account = STS(1 + len(g.enrs))
	}
	g.enrs = append(g.enrs, e)
	s.Enr, s.EnrKind, s.Account = len(g.enrs), e.kind, e.account
	s.MaxAmount = []int64{30000, 60000, 150000, 1000000}[g.rng.IntN(4)]
	c := g.card(false)
	s.Card = &c
	return s
}

func (g *Generator) bill(s Step) Step {
	s.Kind, s.Enr = KindBill, 1+g.rng.IntN(len(g.enrs))
	e := &g.enrs[s.Enr-1]
	s.Pull = g.chance(0.5)
	g.bills++
	if e.kind == "fines" {
		s.BillID = UIN(uint64(g.bills))
		s.BillAmount = []int64{50000, 100000, 300000}[g.rng.IntN(3)]
		if g.chance(0.7) {
			s.Discounted = s.BillAmount / 2
			s.DiscountIn = g.rng.IntN(20)
		}
		s.IssuedAgo = []int{0, 1, 5, 30, 59, 61, 70}[g.rng.IntN(7)]
		s.DueIn = 20 - s.IssuedAgo
		if s.DiscountIn > s.DueIn {
			s.DiscountIn = max(0, s.DueIn)
			if s.DueIn < 0 {
				s.Discounted, s.DiscountIn = 0, 0
			}
		}
	} else {
		s.BillID = fmt.Sprintf("2026-%02d:%d", 1+g.rng.IntN(12), g.bills)
		s.BillAmount = int64(1000 + g.rng.IntN(200000))
		s.DueIn = []int{-9, 0, 1, 3, 10, 25}[g.rng.IntN(6)]
		s.IssuedAgo = 2
	}
	// Bills of a shared account reach every enrollment of it through the
	// source; a push goes to one.
	e.bills = append(e.bills, s.BillID)
	for i := range g.enrs {
		if o := &g.enrs[i]; i != s.Enr-1 && o.account == e.account && o.kind == e.kind {
			o.bills = append(o.bills, s.BillID)
		}
	}
	return s
}

func (s Step) autopayString() string {
	enr := fmt.Sprintf("enr#%d", s.Enr)
	switch s.Kind {
	case KindEnrol:
		return fmt.Sprintf("%s enrol %s %s for %s, max %d, card %s %s", enr, s.EnrKind, s.Account, s.Customer, s.MaxAmount,
			s.Card.Gateway, s.Card.Token)
	case KindBill:
		how := "push"
		if s.Pull {
			how = "publish to the source"
		}
		return fmt.Sprintf("%s bill %s %s %d (discounted %d in %dd) due in %dd issued %dd ago", enr, how, s.BillID, s.BillAmount,
			s.Discounted, s.DiscountIn, s.DueIn, s.IssuedAgo)
	case KindWithdraw:
		return fmt.Sprintf("%s withdraw bill %s", enr, s.BillID)
	case KindEnrolAction:
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", enr, s.Action, s.BillID))
	case KindEnrolCard:
		return fmt.Sprintf("%s card %s %s", enr, s.Card.Gateway, s.Card.Token)
	case KindRegistryFault:
		return fmt.Sprintf("registry %s down=%t", s.Gateway, *s.Down)
	}
	return s.Kind
}
