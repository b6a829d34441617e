package soak

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Autopay step kinds: enrollments (housing bills, traffic fines), their
// bills, and the state payment registry's faults.
const (
	KindEnrol         = "enrol"          // create enrollment Enr (Customer, EnrKind, Account, MaxAmount, Card)
	KindBill          = "bill"           // a bill for Enr's account: pushed to Enr, or published to the dev bill source (Pull)
	KindWithdraw      = "withdraw"       // the issuer withdraws bill BillID of Enr
	KindEnrolAction   = "enrol-action"   // Action pause, resume, cancel or confirm (bill BillID) on Enr
	KindEnrolCard     = "enrol-card"     // give Enr the payment method Card
	KindRegistryFault = "registry-fault" // the registry gateway Gateway: Down, ErrorRate (posts and annulments), LoseResponse, Processing, AnnulUnanswered
	KindPaidElsewhere = "paid-elsewhere" // PaidAmount of fine BillID (of Enr) is paid outside rebill, at a bank
	KindZhkhFault     = "zhkh-fault"     // the simulated GIS ZhKH party Gateway: Down, ErrorRate, LoseResponse, Processing
	// KindClockTo moves the dev clock to a moment of bill BillID of Enr,
	// plus Offset seconds (a barrier, like KindClock): Target
	// TargetDiscount (the end of its discount, read from rebill) or
	// TargetLastAttempt (its expires_at - 1 h). Nothing happens when that
	// moment has passed or the bill is not there.
	KindClockTo = "clock-to"
)

// Clock targets of KindClockTo.
const (
	TargetDiscount    = "discount-ends"
	TargetLastAttempt = "last-attempt"
)

// HoldLifetime is how long the simulated gateways keep a hold.
const HoldLifetime = 7 * 24 * time.Hour

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

	// A housing bill's GIS ZhKH identifiers (ИПД, ИЖКУ, YYYY-MM) and its
	// supplier's INN, when it names them.
	PaymentDocumentID string `json:"payment_document_id,omitempty"`
	ServiceID         string `json:"service_id,omitempty"`
	Period            string `json:"period,omitempty"`
	SupplierINN       string `json:"supplier_inn,omitempty"`

	Target string `json:"target,omitempty"` // clock-to
	Offset int    `json:"offset,omitempty"` // clock-to: seconds after the target (negative: before)

	LoseResponse *bool `json:"lose_response,omitempty"` // registry-fault: posts and annulments made, answers lost
	// Processing (registry-fault) is how many looks a payment posted
	// meanwhile answers "still processing" to before it is accepted.
	Processing *int `json:"processing,omitempty"`
	// AnnulUnanswered (registry-fault): a payment whose acceptance went
	// unanswered (lost, or still processing when last answered) is
	// annulled at the registry at once.
	AnnulUnanswered *bool `json:"annul_unanswered,omitempty"`

	// PaidAmount is paid-elsewhere's payment; Part says what of the fine
	// it is: PartFull, PartDiscounted or PartSome.
	PaidAmount int64  `json:"paid_amount,omitempty"`
	Part       string `json:"part,omitempty"`
}

// What of a fine a payment made outside rebill pays.
const (
	PartFull       = "full"       // the full price
	PartDiscounted = "discounted" // the discounted price (the full one without a discount)
	PartSome       = "some"       // a tenth to nine tenths of the discounted (or full) price
)

// genFine is a fine the generator sent, for payments made outside rebill.
type genFine struct {
	uin                string
	enr                int
	amount, discounted int64
}

// genDoc is a housing bill the generator sent naming its payment
// document, for copies of it.
type genDoc struct {
	enr           int
	account, bill string
	ipd, period   string
	amount        int64
	dueIn         int
}

// SupplierINN is the INN the generator's housing bills name: a real
// organisation's (its check digit agrees), as a bill would carry.
const SupplierINN = "7707083893"

type genEnrollment struct {
	kind, account string
	customer      string
	card          Card
	bills         []string
	// discounted are the bills pushed or published with a discount.
	discounted []string
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

// STS returns a vehicle registration certificate number, its series
// written with the Latin look-alikes of Cyrillic letters (77YA000001, as a
// Latin keyboard types 77УА000001): rebill stores it in Cyrillic, a
// customer enrolling it again in Cyrillic gets 409, and the simulated
// source files its fines under the Latin spelling, which must reach the
// enrollment.
func STS(n int) string {
	letters := "ABEKMHOPCTXY"
	return fmt.Sprintf("77%c%c%06d", letters[n%len(letters)], letters[(n/5)%len(letters)], n)
}

// autopay chooses an autopay step, or returns s unchanged (Kind "") when
// none fits.
func (g *Generator) autopay(s Step) Step {
	r := g.rng.Float64() * 100
	switch {
	case len(g.enrs) < 2 || (r < 18 && len(g.enrs) < g.cfg.MaxEnrollments):
		return g.enrol(s)
	case r < 46:
		if g.chance(0.2) {
			if c := g.housingCopy(s); c.Kind != "" {
				return c
			}
		}
		return g.bill(s)
	case r < 51:
		return g.paidElsewhere(s)
	case r < 54.5:
		return g.clockTo(s)
	case r < 55:
		return g.holdsOutliveGateway(s)
	case r < 55.7:
		return g.processingPastLastMoment(s)
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
		g.enrs[s.Enr-1].card = c
		return s
	default:
		if g.chance(0.35) {
			return g.zhkhFault(s)
		}
		return g.registryFault(s)
	}
}

// zhkhFault switches one of the simulated GIS ZhKH party's faults: down,
// an error rate or lost answers (reports, annulments, look-ups), or
// reports that stay processing for a few looks. Refusals are not among
// them: a refused report is final by design (decision 41), which the
// soak's checks of reports would count against rebill.
func (g *Generator) zhkhFault(s Step) Step {
	s.Kind, s.Gateway = KindZhkhFault, "zhkh1"
	key := s.Gateway + ":"
	switch g.rng.IntN(4) {
	case 0:
		on := !g.regFault[key+"error"] && g.chance(0.7)
		g.regFault[key+"error"] = on
		rate := 0.0
		if on {
			rate = []float64{0.3, 0.6, 0.9, 1}[g.rng.IntN(4)]
		}
		s.ErrorRate = &rate
	case 1:
		on := !g.regFault[key+"lose"] && g.chance(0.7)
		g.regFault[key+"lose"] = on
		s.LoseResponse = &on
	case 2:
		on := !g.regFault[key+"processing"] && g.chance(0.7)
		g.regFault[key+"processing"] = on
		looks := 0
		if on {
			looks = 1 + g.rng.IntN(6)
		}
		s.Processing = &looks
	default:
		down := !g.regDown[s.Gateway] && g.chance(0.7)
		g.regDown[s.Gateway] = down
		s.Down = &down
	}
	return s
}

// housingCopy sends a copy of a housing bill that names its payment
// document (decision 23: a bill with an ИПД is paid once per account and
// bill id and once per ИПД): the same account and bill id without the
// ИПД, pushed to an enrollment of that account; the same ИПД under
// another bill id, pushed to another enrollment (of any account); or a
// new bill pushed first without its ИПД and then with it. Zero Step when
// there is nothing to copy.
func (g *Generator) housingCopy(s Step) Step {
	if len(g.docs) == 0 {
		return Step{}
	}
	d := g.docs[g.rng.IntN(len(g.docs))]
	var sameAccount, others []int
	for i, e := range g.enrs {
		switch {
		case e.kind != "housing":
		case e.account == d.account:
			sameAccount = append(sameAccount, i+1)
		default:
			others = append(others, i+1)
		}
	}
	pick := func(enrs []int) int {
		if len(enrs) == 0 {
			return d.enr
		}
		return enrs[g.rng.IntN(len(enrs))]
	}
	s.Kind, s.BillAmount, s.DueIn, s.IssuedAgo = KindBill, d.amount, d.dueIn, 2
	switch g.rng.IntN(3) {
	case 0:
		s.Enr, s.BillID = pick(sameAccount), d.bill
	case 1:
		g.bills++
		s.Enr, s.BillID = pick(others), fmt.Sprintf("%s:%d", d.period, g.bills)
		s.PaymentDocumentID, s.Period = d.ipd, d.period
		s.Pull = g.chance(0.3)
	default:
		first := g.billOf(s, d.enr)
		first.Pull, first.PaymentDocumentID, first.ServiceID, first.Period, first.SupplierINN = false, "", "", "", ""
		g.recordBill(first)
		with := g.billOf(Step{Node: g.rng.IntN(2)}, pick(sameAccount))
		with.BillID, with.BillAmount, with.DueIn, with.Pull = first.BillID, first.BillAmount, first.DueIn, false
		with.PaymentDocumentID, with.ServiceID, with.Period, with.SupplierINN = g.document(g.enrs[d.enr-1].account, first.BillID)
		g.recordBill(with)
		g.queue = append(g.queue, with)
		return first
	}
	g.recordBill(s)
	return s
}

// document is a housing bill's GIS ZhKH identifiers for account's bill
// billID (YYYY-MM:n): an ИПД of the account, an ИЖКУ and the period.
func (g *Generator) document(account, billID string) (ipd, service, period, inn string) {
	period = billID[:len("2026-01")]
	return fmt.Sprintf("%s-01-%04d", account, g.bills%10000), account + "-01", period, SupplierINN
}

// registryFault switches one of a registry gateway's faults: down (every
// call fails), an error rate or lost answers (posts and annulments; the
// registry's reads answer, so the checks of payments made outside rebill
// still see the book), payments that stay processing for a few looks, or
// a registry that annuls the payments whose acceptance went unanswered
// (switched on together with lost answers or processing, so that a
// look-up or a replay finds them annulled).
func (g *Generator) registryFault(s Step) Step {
	s.Kind = KindRegistryFault
	s.Gateway = fmt.Sprintf("gmp%d", 1+g.rng.IntN(2))
	switch g.rng.IntN(6) {
	case 2:
		on := !g.regFault[s.Gateway+":processing"] && g.chance(0.7)
		g.regFault[s.Gateway+":processing"] = on
		looks := 0
		if on {
			looks = 1 + g.rng.IntN(6)
		}
		s.Processing = &looks
	case 3:
		on := !g.regFault[s.Gateway+":annul"] && g.chance(0.7)
		g.regFault[s.Gateway+":annul"] = on
		s.AnnulUnanswered = &on
		if on && g.chance(0.5) {
			lose := true
			g.regFault[s.Gateway+":lose"] = true
			s.LoseResponse = &lose
		} else if on {
			looks := 1 + g.rng.IntN(3)
			g.regFault[s.Gateway+":processing"] = true
			s.Processing = &looks
		}
	case 0:
		on := !g.regFault[s.Gateway+":error"] && g.chance(0.7)
		g.regFault[s.Gateway+":error"] = on
		rate := 0.0
		if on {
			rate = []float64{0.3, 0.6, 0.9, 1}[g.rng.IntN(4)]
		}
		s.ErrorRate = &rate
	case 1:
		on := !g.regFault[s.Gateway+":lose"] && g.chance(0.7)
		g.regFault[s.Gateway+":lose"] = on
		s.LoseResponse = &on
	default:
		down := !g.regDown[s.Gateway] && g.chance(0.7)
		g.regDown[s.Gateway] = down
		s.Down = &down
	}
	return s
}

// paidElsewhere has a fine paid outside rebill (in full, at its discount,
// or a part) at a moment chosen against rebill's own handling of it:
// before it reaches rebill, at any moment after, while the registry is
// down (rebill's check before the hold waits), while the registry loses or
// refuses postings (a hold waits to be posted: the check before posting
// sees the payment), or while the card's gateway is down (the attempt
// waits for the next one).
func (g *Generator) paidElsewhere(s Step) Step {
	i, ok := g.anyFines()
	if !ok {
		return Step{}
	}
	how := g.rng.IntN(5)
	if how == 1 && len(g.fines) > 0 {
		f := g.fines[g.rng.IntN(len(g.fines))]
		return g.payOutside(s, f.enr, f.uin, f.amount, f.discounted)
	}
	b := g.billOf(Step{Node: g.rng.IntN(2)}, i+1)
	if b.DueIn < 0 {
		b.IssuedAgo, b.DueIn = 1, 19 // due ahead: its hold is rebill's to make
		b.DiscountIn = min(b.DiscountIn, b.DueIn)
	}
	g.recordBill(b)
	pay := g.payOutside(Step{Node: g.rng.IntN(2)}, i+1, b.BillID, b.BillAmount, b.Discounted)
	wait := Step{Kind: KindWait, Wait: "1.5s"}
	registry := func(patch Step) Step {
		patch.Kind, patch.Node = KindRegistryFault, g.rng.IntN(2)
		return patch
	}
	t, f := true, false
	zero := 0.0
	var steps []Step
	switch how {
	case 0, 1:
		steps = []Step{pay, b}
	case 2:
		steps = []Step{registry(Step{Gateway: "gmp1", Down: &t}), registry(Step{Gateway: "gmp2", Down: &t}), b, wait, pay,
			registry(Step{Gateway: "gmp1", Down: &f}), registry(Step{Gateway: "gmp2", Down: &f})}
		g.regDown["gmp1"], g.regDown["gmp2"] = false, false
	case 3:
		patch := func(gw string, on bool) Step {
			g.regFault[gw+":error"], g.regFault[gw+":lose"] = false, false
			if g.chance(0.5) {
				return registry(Step{Gateway: gw, AutopayStep: AutopayStep{LoseResponse: &on}})
			}
			rate := 1.0
			if !on {
				rate = 0
			}
			return registry(Step{Gateway: gw, ErrorRate: &rate})
		}
		steps = []Step{patch("gmp1", true), patch("gmp2", true), b, wait, pay,
			registry(Step{Gateway: "gmp1", ErrorRate: &zero, AutopayStep: AutopayStep{LoseResponse: &f}}),
			registry(Step{Gateway: "gmp2", ErrorRate: &zero, AutopayStep: AutopayStep{LoseResponse: &f}})}
	default:
		gw := g.enrs[i].card.Gateway
		g.fault[gw] = false
		steps = []Step{{Kind: KindFault, Node: g.rng.IntN(2), Gateway: gw, Down: &t}, b, wait, pay,
			{Kind: KindFault, Node: g.rng.IntN(2), Gateway: gw, Down: &f}}
	}
	first := steps[0]
	first.N = s.N
	g.queue = append(g.queue, steps[1:]...)
	return first
}

// payOutside is a paid-elsewhere step paying part of fine uin of
// enrollment enr.
func (g *Generator) payOutside(s Step, enr int, uin string, amount, discounted int64) Step {
	s.Kind, s.Enr, s.BillID = KindPaidElsewhere, enr, uin
	price := amount
	if discounted > 0 {
		price = discounted
	}
	switch r := g.rng.Float64(); {
	case r < 0.35:
		s.Part, s.PaidAmount = PartFull, amount
	case r < 0.6:
		s.Part, s.PaidAmount = PartDiscounted, price
	default:
		s.Part, s.PaidAmount = PartSome, price*int64(1+g.rng.IntN(9))/10
	}
	return s
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
	// A customer enrolling again what they have (rebill answers 409
	// enrollment-exists, naming it; the driver then acts on that one) is
	// written, half the time, with the Cyrillic letters rebill stores.
	s.Customer = fmt.Sprintf("payer-%d", 1+len(g.enrs))
	s.Account = ""
	if len(same) > 0 && g.chance(0.35) {
		i := same[g.rng.IntN(len(same))]
		e.account = g.enrs[i].account
		if g.chance(0.35) {
			s.Customer = g.enrs[i].customer
			if g.chance(0.5) {
				s.Account = Cyrillic(e.account)
			}
		}
	} else if e.kind == "housing" {
		e.account = ELS(1 + len(g.enrs))
	} else {
		e.account = STS(1 + len(g.enrs))
	}
	e.customer = s.Customer
	if s.Account == "" {
		s.Account = e.account
	}
	g.enrs = append(g.enrs, e)
	s.Enr, s.EnrKind = len(g.enrs), e.kind
	s.MaxAmount = []int64{30000, 60000, 150000, 1000000}[g.rng.IntN(4)]
	c := g.card(false)
	s.Card = &c
	g.enrs[s.Enr-1].card = c
	return s
}

// Cyrillic writes an account's Latin look-alike capitals in Cyrillic.
func Cyrillic(account string) string {
	return strings.NewReplacer("A", "А", "B", "В", "E", "Е", "K", "К", "M", "М", "H", "Н", "O", "О", "P", "Р",
		"C", "С", "T", "Т", "X", "Х", "Y", "У").Replace(account)
}

// clockTo aims a clock move at a bill's deadline: just before or after a
// fine's discount ends, or around (or exactly at) the last moment an
// attempt may start, expires_at - 1 h.
func (g *Generator) clockTo(s Step) Step {
	s.Kind = KindClockTo
	var fits []int
	for i, e := range g.enrs {
		if len(e.bills) > 0 {
			fits = append(fits, i)
		}
	}
	if len(fits) == 0 {
		return Step{}
	}
	i := fits[g.rng.IntN(len(fits))]
	e := g.enrs[i]
	s.Enr = i + 1
	if len(e.discounted) > 0 && g.chance(0.6) {
		s.Target, s.BillID = TargetDiscount, e.discounted[g.rng.IntN(len(e.discounted))]
	} else {
		s.Target, s.BillID = TargetLastAttempt, e.bills[g.rng.IntN(len(e.bills))]
	}
	switch g.rng.IntN(5) {
	case 0:
		s.Offset = 0 // the very moment
	case 1, 2:
		s.Offset = -1 - g.rng.IntN(600)
	default:
		s.Offset = 1 + g.rng.IntN(600)
	}
	return s
}

// processingPastLastMoment has the registry answer "still processing"
// past a discounted hold's last moment to post (an hour before the
// discount ends): both registry gateways keep new payments processing for
// more looks than the posting job makes before the clock moves, a
// discounted fine falls due and is held and posted, the clock moves into
// the last hour before its discount ends (the hold is voided, the posting
// abandoned), and processing stops for new payments while the abandoned
// one still answers "processing" for its remaining looks, then is
// accepted: rebill must annul it. Half the time the registry also annuls
// payments whose acceptance it did not answer.
func (g *Generator) processingPastLastMoment(s Step) Step {
	i, ok := g.anyFines()
	if !ok {
		return Step{}
	}
	registry := func(gw string, patch Step) Step {
		patch.Kind, patch.Node, patch.Gateway = KindRegistryFault, g.rng.IntN(2), gw
		return patch
	}
	looks, off := 8+g.rng.IntN(8), 0
	annul, f := g.chance(0.5), false
	steps := []Step{registry("gmp1", Step{AutopayStep: AutopayStep{Processing: &looks, AnnulUnanswered: &annul}}),
		registry("gmp2", Step{AutopayStep: AutopayStep{Processing: &looks, AnnulUnanswered: &annul}})}
	b := g.billOf(Step{Node: g.rng.IntN(2)}, i+1)
	b.Pull = false
	b.Discounted, b.IssuedAgo, b.DueIn, b.DiscountIn = b.BillAmount/2, 1, 19, 3+g.rng.IntN(10)
	g.recordBill(b)
	steps = append(steps, b, Step{Kind: KindWait, Wait: "1.5s"},
		Step{Kind: KindClockTo, Node: g.rng.IntN(2), AutopayStep: AutopayStep{Enr: i + 1, Target: TargetDiscount, BillID: b.BillID,
			Offset: -60 - g.rng.IntN(3000)}},
		registry("gmp1", Step{AutopayStep: AutopayStep{Processing: &off, AnnulUnanswered: &f}}),
		registry("gmp2", Step{AutopayStep: AutopayStep{Processing: &off, AnnulUnanswered: &f}}))
	for _, gw := range []string{"gmp1", "gmp2"} {
		g.regFault[gw+":processing"], g.regFault[gw+":annul"] = false, false
	}
	first := steps[0]
	first.N = s.N
	g.queue = append(g.queue, steps[1:]...)
	return first
}

// holdsOutliveGateway leaves holds waiting past their lifetime (the
// simulators' 7 days): both registry gateways go down, a fine falls due
// and is held, then either the registry stays down (the posting waits)
// or it comes back with the card's gateway down (the capture waits), and
// the clock moves past the hold's lifetime. Later steps (or the drain)
// bring them back.
func (g *Generator) holdsOutliveGateway(s Step) Step {
	i, ok := g.anyFines()
	if !ok {
		return Step{}
	}
	registry := func(gw string, down bool) Step {
		return Step{Kind: KindRegistryFault, Node: g.rng.IntN(2), Gateway: gw, Down: &down}
	}
	steps := []Step{registry("gmp1", true), registry("gmp2", true)}
	g.regDown["gmp1"], g.regDown["gmp2"] = true, true
	b := g.billOf(Step{Node: g.rng.IntN(2)}, i+1)
	b.Pull = false
	b.IssuedAgo, b.DueIn, b.Discounted, b.DiscountIn = 1, 19, 0, 0
	if g.chance(0.5) {
		b.Discounted, b.DiscountIn = b.BillAmount/2, 8+g.rng.IntN(10)
	}
	g.recordBill(b)
	steps = append(steps, b, Step{Kind: KindWait, Wait: "1.5s"})
	if g.chance(0.5) {
		down := true
		gw := g.enrs[i].card.Gateway
		g.fault[gw] = true
		steps = append(steps, Step{Kind: KindFault, Node: g.rng.IntN(2), Gateway: gw, Down: &down},
			registry("gmp1", false), registry("gmp2", false), Step{Kind: KindWait, Wait: "1s"})
		g.regDown["gmp1"], g.regDown["gmp2"] = false, false
	}
	lapse := HoldLifetime + time.Duration(1+g.rng.IntN(3))*time.Hour + time.Duration(1+g.rng.IntN(59))*time.Second
	steps = append(steps, Step{Kind: KindClock, Node: g.rng.IntN(2), Advance: lapse.String()})
	first := steps[0]
	first.N = s.N
	g.queue = append(g.queue, steps[1:]...)
	return first
}

func (g *Generator) bill(s Step) Step {
	s = g.billOf(s, 1+g.rng.IntN(len(g.enrs)))
	g.recordBill(s)
	return s
}

// billOf chooses a bill for enrollment enr.
func (g *Generator) billOf(s Step, enr int) Step {
	s.Kind, s.Enr = KindBill, enr
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
		if g.chance(0.5) {
			s.PaymentDocumentID, s.ServiceID, s.Period, s.SupplierINN = g.document(e.account, s.BillID)
		}
	}
	return s
}

// recordBill records a bill step's bill with its enrollment's account.
// Bills of a shared account reach every enrollment of it through the
// source; a push goes to one.
func (g *Generator) recordBill(s Step) {
	e := g.enrs[s.Enr-1]
	for i := range g.enrs {
		if o := &g.enrs[i]; o.account == e.account && o.kind == e.kind {
			o.bills = append(o.bills, s.BillID)
			if s.Discounted > 0 {
				o.discounted = append(o.discounted, s.BillID)
			}
		}
	}
	if e.kind == "fines" {
		g.fines = append(g.fines, genFine{uin: s.BillID, enr: s.Enr, amount: s.BillAmount, discounted: s.Discounted})
	}
	if s.PaymentDocumentID != "" && s.ServiceID != "" {
		g.docs = append(g.docs, genDoc{enr: s.Enr, account: e.account, bill: s.BillID, ipd: s.PaymentDocumentID,
			period: s.Period, amount: s.BillAmount, dueIn: s.DueIn})
	}
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
		doc := ""
		if s.PaymentDocumentID != "" {
			doc = " ИПД " + s.PaymentDocumentID
		}
		return fmt.Sprintf("%s bill %s %s%s %d (discounted %d in %dd) due in %dd issued %dd ago", enr, how, s.BillID, doc,
			s.BillAmount, s.Discounted, s.DiscountIn, s.DueIn, s.IssuedAgo)
	case KindWithdraw:
		return fmt.Sprintf("%s withdraw bill %s", enr, s.BillID)
	case KindEnrolAction:
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", enr, s.Action, s.BillID))
	case KindEnrolCard:
		return fmt.Sprintf("%s card %s %s", enr, s.Card.Gateway, s.Card.Token)
	case KindRegistryFault, KindZhkhFault:
		var parts []string
		if s.Down != nil {
			parts = append(parts, fmt.Sprintf("down=%t", *s.Down))
		}
		if s.ErrorRate != nil {
			parts = append(parts, fmt.Sprintf("error_rate=%.2f", *s.ErrorRate))
		}
		if s.LoseResponse != nil {
			parts = append(parts, fmt.Sprintf("lose_response=%t", *s.LoseResponse))
		}
		if s.Processing != nil {
			parts = append(parts, fmt.Sprintf("processing=%d", *s.Processing))
		}
		if s.AnnulUnanswered != nil {
			parts = append(parts, fmt.Sprintf("annul_unanswered=%t", *s.AnnulUnanswered))
		}
		if s.Kind == KindZhkhFault {
			return fmt.Sprintf("GIS ZhKH party %s %s", s.Gateway, strings.Join(parts, " "))
		}
		return fmt.Sprintf("registry %s %s", s.Gateway, strings.Join(parts, " "))
	case KindPaidElsewhere:
		return fmt.Sprintf("%s fine %s paid outside rebill: %d (%s)", enr, s.BillID, s.PaidAmount, s.Part)
	case KindClockTo:
		return fmt.Sprintf("clock to %s of bill %s of %s %+ds", s.Target, s.BillID, enr, s.Offset)
	}
	return s.Kind
}

// anyFines picks one of the fines enrollments, false when there is none.
func (g *Generator) anyFines() (int, bool) {
	var fines []int
	for i, e := range g.enrs {
		if e.kind == "fines" {
			fines = append(fines, i)
		}
	}
	if len(fines) == 0 {
		return 0, false
	}
	return fines[g.rng.IntN(len(fines))], true
}
