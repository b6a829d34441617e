// Package billcheck holds the money rules of autopay bills as checks over
// plain data, so that `rebill audit` (reading the database and the
// gateways) and the chaos soak (reading the API, the database and the
// simulated gateways and registry) judge bills by the same code.
//
// The rules (api/openapi.json, decisions 23-26):
//   - a bill identity is captured at most once across the service: a fine
//     by its UIN, a housing bill by its account (ELS) and bill id;
//   - no capture above the enrollment's max_amount unless a confirmation
//     covers it (the amount due when the bill was confirmed: the full
//     price from LastDiscountedMargin before the discount ends on);
//   - no fine is captured without an accepted, un-annulled posting to the
//     state payment registry of that attempt and amount;
//   - an accepted posting whose money was not captured is annulled within
//     AnnulWithin of the service clock;
//   - a fine is paid at its discounted price only while the discount
//     holds: by an attempt that started before the discount ended
//     (either price less what its charge found paid outside rebill);
//   - no attempt starts at or after the bill's expires_at minus
//     LastAttemptMargin. rebill numbers a new attempt when it schedules
//     it (a dunning retry, a card change, a person's retry) and decides
//     at its "about to call" whether it may start: one scheduled at or
//     after that moment is voided there (bill_expired) without a call.
//     So the rule is that no operation of such an attempt reaches a
//     gateway; an attempt recorded late that nothing shows was sent is
//     not a violation.
//
// When the discount held is decided by when the attempt started, not by
// when its capture reached the gateway. rebill prices an attempt when it
// starts, and the registry is told of that attempt's hold at that price;
// a capture sent before the service clock moves (a dev clock jump, or
// simply the deadline passing while the request is on the wire) is
// stamped after the move. Money captured at the discounted price after
// the deadline is therefore a violation only if its attempt started at or
// after the deadline. The gateways' stamps (when they are on the service
// clock, OpsOnServiceClock) only ever clear a doubt: an attempt whose
// start rebill did not record began no later than its authorization was
// stamped, so an authorization stamped before the deadline shows the
// attempt did too. A stamp never convicts a capture on its own.
package billcheck

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Invariant names.
const (
	OneCapturePerIdentity = "bill-one-capture-per-identity"
	WithinCap             = "bill-capture-within-cap"
	FinePosted            = "fine-capture-posted"
	PostingAnnulled       = "bill-posting-annulled"
	DiscountHonest        = "fine-discount-while-it-holds"
	NoLateAttempt         = "bill-no-attempt-after-expiry"
)

// LastAttemptMargin: no attempt starts at or after this long before a
// bill's expires_at (decisions 23 and 31: "at or after").
const LastAttemptMargin = time.Hour

// LastDiscountedMargin: an attempt of a fine that starts at or after this
// long before its discount ends (its last discounted start, decision 24)
// is at the full price, and a confirmation given then covers it.
const LastDiscountedMargin = time.Hour

// Data is what the checks judge. Times are the service clock's, except
// Op.At (the gateway's own stamp).
type Data struct {
	Now         time.Time
	Enrollments []Enrollment
	Bills       []Bill
	// Charges are the bills' charges (charges of subscriptions are
	// ignored).
	Charges []Charge
	// Ops are the gateways' operations; those whose key names no bill
	// charge are ignored.
	Ops []Op
	// Postings are the registry postings of the bills' charges.
	Postings []Posting
	// AnnulWithin bounds how long after its charge last changed an
	// accepted posting of an uncaptured attempt may stand; 0 means 24 h.
	AnnulWithin time.Duration
	// OpsOnServiceClock: Op.At is on the service clock (dev mode, where
	// the simulated gateways stamp the dev clock), so an authorization's
	// stamp bounds when its attempt started (see the package comment: it
	// clears a doubt, it never convicts). False for real gateways, whose
	// stamps are their own machines' wall clocks.
	OpsOnServiceClock bool
}

// Enrollment is an autopay enrollment.
type Enrollment struct {
	ID, CustomerID, Kind string // Kind: housing or fines
	ELS                  string
	MaxAmount            int64
}

// Bill is one bill of an enrollment.
type Bill struct {
	ID, EnrollmentID, BillID string
	Amount                   int64
	DiscountedAmount         *int64
	DiscountEnds             *time.Time
	ExpiresAt                time.Time
	Status                   string
	ConfirmedAt              *time.Time
	ChargeID                 string
}

// Charge is a bill's charge.
type Charge struct {
	ID, EnrollmentID, BillID string
	Status                   string
	AttemptCount             int
	AttemptTimes             []time.Time
	UpdatedAt                time.Time
	// PaidOutside is what was paid against the bill outside rebill as
	// the check before its last attempt found it: that attempt is for the
	// price less it.
	PaidOutside int64
	// HoldReleased: its hold was released after a look-up at the gateway
	// found no capture (hold_released_at): a charge in review so marked
	// will not capture its attempt.
	HoldReleased bool
}

// Key is the charge's business key, as its gateway keys begin.
func (c Charge) Key() string { return c.EnrollmentID + ":" + c.BillID }

// Op is one gateway operation.
type Op struct {
	Gateway, Op, IdempotencyKey, Status string
	Amount                              int64
	At                                  time.Time
}

// Posting is one attempt's posting to the state payment registry.
type Posting struct {
	PaymentID, ChargeID string
	Attempt             int
	UIN                 string
	Amount              int64
	Status              string // posting, accepted, abandoned, failed, cancelled, annulled
	// RegistryStatus is the registry's own book's status of PaymentID
	// (processing, accepted, annulled, not_found) when its book was read;
	// "" when not.
	RegistryStatus string
}

// Violation is one broken rule.
type Violation struct {
	Invariant  string
	Enrollment string
	Bill       string // the bill's issuer id
	Charge     string // the charge key
	Detail     string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s enrollment=%s bill=%q charge=%s: %s", v.Invariant, v.Enrollment, v.Bill, v.Charge, v.Detail)
}

// SplitGatewayKey splits `<charge key>:a<attempt>:<op>`; ok is false for
// a key rebill would not write. The charge key is everything before the
// last two parts, so bill ids may hold ':'.
func SplitGatewayKey(key string) (chargeKey string, attempt int, op string, ok bool) {
	i := strings.LastIndexByte(key, ':')
	if i < 0 {
		return "", 0, "", false
	}
	rest, op := key[:i], key[i+1:]
	j := strings.LastIndexByte(rest, ':')
	if j < 0 || !strings.HasPrefix(rest[j+1:], "a") {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(rest[j+2:])
	if err != nil || n < 1 {
		return "", 0, "", false
	}
	return rest[:j], n, op, true
}

// latinToCyrillic are the Latin capitals that look exactly like Cyrillic
// ones: an ELS written with them is the same account.
var latinToCyrillic = strings.NewReplacer("A", "А", "B", "В", "E", "Е", "K", "К", "M", "М", "H", "Н", "O", "О", "P", "Р",
	"C", "С", "T", "Т", "X", "Х", "Y", "У")

// Identity is what a bill is paid once for: a fine's UIN across the
// service, a housing bill's account and bill id.
func Identity(kind, els, billID string) string {
	if kind == "fines" {
		return "fine " + billID
	}
	return "housing " + latinToCyrillic.Replace(strings.ToUpper(els)) + " " + billID
}

type capture struct {
	op      Op
	attempt int
}

// authorized is when attempt's succeeded authorization was stamped.
func (x *index) authorized(key string, attempt int) (time.Time, bool) {
	at, ok := x.auths[key][attempt]
	return at, ok
}

// index joins the data: each bill with its enrollment, charge and captures.
type index struct {
	d           *Data
	enrollments map[string]*Enrollment
	charges     map[string]*Charge // by key
	byID        map[string]*Charge
	bills       map[string]*Bill // by charge key
	captures    map[string][]capture
	auths       map[string]map[int]time.Time // succeeded authorizations' stamps, by charge key and attempt
	sent        map[string]map[int][]string  // every operation sent, by charge key and attempt
	postings    map[string][]Posting         // by charge id
}

func newIndex(d *Data) *index {
	x := &index{d: d, enrollments: map[string]*Enrollment{}, charges: map[string]*Charge{}, byID: map[string]*Charge{},
		bills: map[string]*Bill{}, captures: map[string][]capture{}, auths: map[string]map[int]time.Time{}, sent: map[string]map[int][]string{}, postings: map[string][]Posting{}}
	for i := range d.Enrollments {
		x.enrollments[d.Enrollments[i].ID] = &d.Enrollments[i]
	}
	for i := range d.Charges {
		c := &d.Charges[i]
		x.charges[c.Key()], x.byID[c.ID] = c, c
	}
	for i := range d.Bills {
		b := &d.Bills[i]
		x.bills[b.EnrollmentID+":"+b.BillID] = b
	}
	for _, o := range d.Ops {
		key, attempt, op, ok := SplitGatewayKey(o.IdempotencyKey)
		if ok && op == "capture" && o.Status == "succeeded" && x.charges[key] != nil {
			x.captures[key] = append(x.captures[key], capture{op: o, attempt: attempt})
		}
		if ok && x.charges[key] != nil {
			if x.sent[key] == nil {
				x.sent[key] = map[int][]string{}
			}
			x.sent[key][attempt] = append(x.sent[key][attempt], fmt.Sprintf("%s %s %d at %s", op, o.Status, o.Amount, o.Gateway))
		}
		if ok && op == "authorize" && o.Status == "succeeded" && x.charges[key] != nil {
			if x.auths[key] == nil {
				x.auths[key] = map[int]time.Time{}
			}
			x.auths[key][attempt] = o.At
		}
	}
	for _, p := range d.Postings {
		x.postings[p.ChargeID] = append(x.postings[p.ChargeID], p)
	}
	return x
}

func (x *index) kind(c *Charge) string {
	if e := x.enrollments[c.EnrollmentID]; e != nil {
		return e.Kind
	}
	return ""
}

func (x *index) viol(inv string, c *Charge, format string, args ...any) Violation {
	return Violation{Invariant: inv, Enrollment: c.EnrollmentID, Bill: c.BillID, Charge: c.Key(), Detail: fmt.Sprintf(format, args...)}
}

// keys are the charge keys in a stable order.
func (x *index) keys() []string {
	out := make([]string, 0, len(x.charges))
	for k := range x.charges {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Check runs every rule.
func Check(d *Data) []Violation {
	x := newIndex(d)
	var out []Violation
	out = append(out, x.oneCapturePerIdentity()...)
	for _, key := range x.keys() {
		c := x.charges[key]
		out = append(out, x.withinCap(c)...)
		out = append(out, x.finePosted(c)...)
		out = append(out, x.discountHonest(c)...)
		out = append(out, x.noLateAttempt(c)...)
	}
	out = append(out, x.postingsAnnulled()...)
	return out
}

func (x *index) oneCapturePerIdentity() []Violation {
	type paid struct {
		c   *Charge
		cap capture
	}
	byIdentity := map[string][]paid{}
	for _, key := range x.keys() {
		c := x.charges[key]
		e := x.enrollments[c.EnrollmentID]
		if e == nil {
			continue
		}
		id := Identity(e.Kind, e.ELS, c.BillID)
		for _, cp := range x.captures[key] {
			byIdentity[id] = append(byIdentity[id], paid{c, cp})
		}
	}
	ids := make([]string, 0, len(byIdentity))
	for id := range byIdentity {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []Violation
	for _, id := range ids {
		ps := byIdentity[id]
		if len(ps) < 2 {
			continue
		}
		parts := make([]string, len(ps))
		for i, p := range ps {
			parts[i] = fmt.Sprintf("%s a%d %d at %s", p.c.Key(), p.cap.attempt, p.cap.op.Amount, p.cap.op.Gateway)
		}
		out = append(out, x.viol(OneCapturePerIdentity, ps[1].c, "%s captured %d times: %s", id, len(ps), strings.Join(parts, "; ")))
	}
	return out
}

func (x *index) withinCap(c *Charge) []Violation {
	e, b := x.enrollments[c.EnrollmentID], x.bills[c.Key()]
	if e == nil {
		return nil
	}
	var out []Violation
	for _, cp := range x.captures[c.Key()] {
		if cp.op.Amount <= e.MaxAmount {
			continue
		}
		if b != nil && b.ConfirmedAt != nil {
			if covered := b.amountDue(*b.ConfirmedAt); cp.op.Amount <= covered {
				continue
			}
		}
		confirmed := "never confirmed"
		if b != nil && b.ConfirmedAt != nil {
			confirmed = fmt.Sprintf("confirmed at %s for %d", b.ConfirmedAt.Format(time.RFC3339), b.amountDue(*b.ConfirmedAt))
		}
		out = append(out, x.viol(WithinCap, c, "a%d captured %d above max_amount %d, %s", cp.attempt, cp.op.Amount, e.MaxAmount, confirmed))
	}
	return out
}

// amountDue is the bill's price for an attempt that starts at t.
func (b *Bill) amountDue(t time.Time) int64 {
	if b.DiscountedAmount != nil && b.DiscountEnds != nil && t.Before(b.DiscountEnds.Add(-LastDiscountedMargin)) {
		return *b.DiscountedAmount
	}
	return b.Amount
}

func (x *index) finePosted(c *Charge) []Violation {
	if x.kind(c) != "fines" {
		return nil
	}
	var out []Violation
	for _, cp := range x.captures[c.Key()] {
		ok := false
		for _, p := range x.postings[c.ID] {
			if p.Attempt == cp.attempt && p.Amount == cp.op.Amount && p.Status == "accepted" &&
				(p.RegistryStatus == "" || p.RegistryStatus == "accepted") {
				ok = true
			}
		}
		if !ok {
			out = append(out, x.viol(FinePosted, c, "a%d captured %d with no accepted, un-annulled posting of that attempt and amount (postings: %s)",
				cp.attempt, cp.op.Amount, describePostings(x.postings[c.ID])))
		}
	}
	return out
}

func describePostings(ps []Posting) string {
	if len(ps) == 0 {
		return "none"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("a%d %d %s", p.Attempt, p.Amount, p.Status)
		if p.RegistryStatus != "" {
			parts[i] += "/registry " + p.RegistryStatus
		}
	}
	return strings.Join(parts, ", ")
}

func (x *index) discountHonest(c *Charge) []Violation {
	b := x.bills[c.Key()]
	if b == nil || b.DiscountedAmount == nil || b.DiscountEnds == nil {
		return nil
	}
	var out []Violation
	full, discounted := b.Amount-c.PaidOutside, *b.DiscountedAmount-c.PaidOutside
	for _, cp := range x.captures[c.Key()] {
		if cp.op.Amount == full {
			continue
		}
		if cp.op.Amount != discounted {
			out = append(out, x.viol(DiscountHonest, c, "a%d captured %d: neither the full %d nor the discounted %d (less %d paid outside rebill)",
				cp.attempt, cp.op.Amount, b.Amount, *b.DiscountedAmount, c.PaidOutside))
			continue
		}
		if cp.attempt <= len(c.AttemptTimes) {
			if start := c.AttemptTimes[cp.attempt-1]; !start.Before(*b.DiscountEnds) {
				out = append(out, x.viol(DiscountHonest, c, "a%d captured the discounted %d but started at %s, not before the discount ended at %s",
					cp.attempt, cp.op.Amount, start.Format(time.RFC3339), b.DiscountEnds.Format(time.RFC3339)))
			}
			continue
		}
		if at, ok := x.authorized(c.Key(), cp.attempt); ok && x.d.OpsOnServiceClock && at.Before(*b.DiscountEnds) {
			continue // authorized, so started, before the deadline
		}
		out = append(out, x.viol(DiscountHonest, c, "a%d captured the discounted %d and nothing shows it started before the discount ended at %s",
			cp.attempt, cp.op.Amount, b.DiscountEnds.Format(time.RFC3339)))
	}
	return out
}

func (x *index) noLateAttempt(c *Charge) []Violation {
	b := x.bills[c.Key()]
	if b == nil {
		return nil
	}
	latest := b.ExpiresAt.Add(-LastAttemptMargin)
	var out []Violation
	for i, at := range c.AttemptTimes {
		if sent := x.sent[c.Key()][i+1]; !at.Before(latest) && len(sent) > 0 {
			out = append(out, x.viol(NoLateAttempt, c, "a%d started at %s, at or after expires_at %s - %s, and was sent: %s", i+1,
				at.Format(time.RFC3339), b.ExpiresAt.Format(time.RFC3339), LastAttemptMargin, strings.Join(sent, "; ")))
		}
	}
	return out
}

// postingsAnnulled: an accepted posting of an attempt that has no capture
// and never will (a later attempt exists, or the charge is final, waiting
// for a new attempt, or in review with its hold released) is annulled
// once AnnulWithin passed since the charge last changed. Where the
// registry's book was read, its status decides what stands: a posting
// rebill gave up on (abandoned, failed) that the registry accepted after
// all is caught too, and a payment it still processes stands too.
func (x *index) postingsAnnulled() []Violation {
	bound := x.d.AnnulWithin
	if bound == 0 {
		bound = 24 * time.Hour
	}
	var out []Violation
	for _, p := range x.d.Postings {
		c := x.byID[p.ChargeID]
		status := p.Status
		if p.RegistryStatus != "" {
			status = p.RegistryStatus // the registry's own book decides
		}
		// A payment the registry still processes may yet be accepted: it
		// stands as much as an accepted one until it is withdrawn.
		if c == nil || (status != "accepted" && status != "processing") {
			continue
		}
		captured := false
		for _, cp := range x.captures[c.Key()] {
			captured = captured || cp.attempt == p.Attempt
		}
		done := c.AttemptCount > p.Attempt
		switch c.Status {
		case "succeeded", "failed", "voided", "declined", "scheduled":
			done = true
		case "requires_review":
			done = done || c.HoldReleased
		}
		if captured || !done || x.d.Now.Sub(c.UpdatedAt) < bound {
			continue
		}
		out = append(out, x.viol(PostingAnnulled, c, "posting %s of a%d (%d, %s; registry %q) stands although the attempt was not captured "+
			"and the charge is %s at a%d since %s", p.PaymentID, p.Attempt, p.Amount, p.Status, p.RegistryStatus, c.Status,
			c.AttemptCount, c.UpdatedAt.Format(time.RFC3339)))
	}
	return out
}
