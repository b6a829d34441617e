package soak

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Data is everything the invariants judge: rebill's own state (read
// through the API or the database), the gateways' ledgers, and optionally
// what an outside observer recorded while it drove rebill (the soak does;
// an audit command would not). The invariants take Data, never a client,
// so any tool that can fill it can reuse them.
type Data struct {
	// Now is the service clock when the data was read.
	Now time.Time
	// Subscriptions are every subscription judged, with their events log
	// and charges.
	Subscriptions []Subscription
	// Ledger is every operation the gateways recorded, all gateways, but
	// those of bill charges when autopay is judged apart (BillLedger).
	Ledger []LedgerOp
	// BillLedger are the operations of bill charges that the autopay
	// checks took out of Ledger, so that the periods' checks see only
	// subscriptions; the refund checks, which judge every charge, read
	// both.
	BillLedger []LedgerOp
	// Observed is what the driver saw happen in real time; nil when there
	// was no driver. Checks that need it skip their observed parts then.
	Observed *Observations
	// Fines are the fines autopay enrollments carried, one per UIN, with
	// what rebill did about them and what the registry's book holds
	// against them; the checks of payments made outside rebill judge
	// them.
	Fines []Fine
	// Slots are the declines-limit slots held when the data was read.
	Slots []Slot
	// Refunds are rebill's refunds of the judged charges; the ledger's
	// refund operations are judged against them.
	Refunds []Refund
	// Housing are the housing bills' charges with the simulated GIS ZhKH
	// party's reports of them; ZhkhStray the party's reports of no
	// housing charge. Nil when the run had no autopay.
	Housing   []HousingPayment
	ZhkhStray []ZhkhEntry
}

// Slot is one declines-limit slot: its customer and its holder, a
// charge's attempt written <charge id>/<attempt>.
type Slot struct {
	Customer, Holder string
}

// Fine is one UIN: its price, every enrollment's copy of it, rebill's
// holds and captures of any copy, and the registry's book of it.
type Fine struct {
	UIN string
	// Amount is the full price; DiscountedAmount applies before
	// DiscountEnds (both nil without a discount).
	Amount           int64
	DiscountedAmount *int64
	DiscountEnds     *time.Time
	Bills            []FineBill
	// Holds and Captures are the succeeded authorizations and captures
	// of the copies' charges, stamped on the service clock.
	Holds, Captures []FineOp
	// Book is the registry's book of the UIN in the order it was
	// written: rebill's postings and payments made outside rebill.
	Book []BookEntry
}

// FineBill is one enrollment's copy of a fine.
type FineBill struct {
	EnrollmentID string
	Status       string // paid_elsewhere: paid in full outside rebill
	ChargeKey    string // its charge's key, "" when it never had one
	// ChargeStatus and Attempt are its charge's status and attempt
	// count; Posting is the status of rebill's posting of that attempt
	// (posting, accepted, failed, cancelled, annulled; "" without one).
	ChargeStatus, Posting string
	Attempt               int
}

// FineOp is one gateway operation of a fine's charge.
type FineOp struct {
	ChargeKey string
	Attempt   int
	Amount    int64
	At        time.Time
}

// BookEntry is one payment in the registry's book.
type BookEntry struct {
	Seq       int64
	PaymentID string
	Gateway   string // "outside" for a payment made outside rebill
	Amount    int64
	Status    string // accepted or annulled
	At        time.Time
	// ChargeKey and Attempt name the posting of rebill's this payment
	// is; "" for a payment made outside rebill.
	ChargeKey string
	Attempt   int
}

// OutsideGateway is the book's name for payments made outside rebill.
const OutsideGateway = "outside"

// Outside reports whether the entry is a payment made outside rebill.
func (e BookEntry) Outside() bool { return e.ChargeKey == "" && e.Gateway == OutsideGateway }

// Stands reports whether the entry counts as paid (not annulled).
func (e BookEntry) Stands() bool { return e.Status != "annulled" }

// Subscription is a subscription as GET /v1/subscriptions/{id} shows it,
// with its events (GET .../events, oldest first) and charges.
type Subscription struct {
	ID                string
	CustomerID        string
	Status            string
	Amount            int64
	Currency          string
	Interval          string
	IntervalCount     int
	TimeZone          string
	BillingAnchor     time.Time
	CancelAtPeriodEnd bool
	CancelledAt       *time.Time
	CreatedAt         time.Time
	// TrialEnd is when its trial ends (nil without one).
	TrialEnd *time.Time
	Events   []Event
	// Charges are its charges: one per period, and the adjustment
	// charges of its changes (Charge.Adjustment).
	Charges []Charge
	// Changes are the changes of its terms rebill recorded, oldest first,
	// and Credits its credit ledger.
	Changes []Change
	Credits []Credit
}

// Change is one change of a subscription's terms as rebill recorded it.
type Change struct {
	ID                            string
	Effective, Proration          string
	AmountBefore, AmountAfter     int64
	IntervalBefore, IntervalAfter string
	CountBefore, CountAfter       int
	// PeriodKey is the period whose unused time was prorated.
	PeriodKey string
	// Adjustment: more than 0 charged now, less than 0 credited.
	Adjustment int64
	// CreatedAt is the service clock of the request; AppliedAt when the
	// new terms took effect (nil while pending, or when removed).
	CreatedAt time.Time
	AppliedAt *time.Time
}

// IntervalChanged reports whether the change restarted the schedule.
func (c Change) IntervalChanged() bool {
	return c.IntervalAfter != c.IntervalBefore || c.CountAfter != c.CountBefore
}

// RestartSuffix is the period key suffix of the schedule an immediate
// interval change restarted ("" for any other change).
func (c Change) RestartSuffix() string {
	if c.Effective != "now" || !c.IntervalChanged() || len(c.ID) < 8 {
		return ""
	}
	return "~" + c.ID[len(c.ID)-8:]
}

// Credit is one entry of a subscription's credit ledger: granted by a
// change (Amount > 0) or used by a period's charge (Amount < 0).
type Credit struct {
	ChangeID    string
	PeriodKey   string
	PeriodStart *time.Time // of the period that used it
	Amount      int64
	At          time.Time
}

// Event is one entry of a subscription's events log.
type Event struct {
	ID        int64
	Type      string
	From      string // empty for created
	To        string
	ActorID   string
	ActorRole string
	At        time.Time
}

// System reports whether rebill made the change on its own.
func (e Event) System() bool { return e.ActorRole == "system" }

// Charge is one period's charge. PeriodStart, UnknownPhase and Resolution
// are not in the API's charge object: they come from the database.
type Charge struct {
	ID             string
	SubscriptionID string
	PeriodKey      string
	PeriodStart    time.Time
	Key            string // <subscription_id>:<period_key>
	Amount         int64
	Currency       string
	Gateway        string
	Status         string
	AttemptCount   int
	NextAttemptAt  *time.Time
	FailureCode    string
	ReviewReason   string
	UnknownPhase   string
	Resolution     string // succeeded or failed when a person resolved it
}

// Adjustment reports whether the charge is a change's adjustment rather
// than a period's charge; ChangeID names that change.
func (c Charge) Adjustment() bool { return strings.Contains(c.PeriodKey, adjMark) }

// ChangeID is the change an adjustment charge belongs to ("" for a
// period's charge).
func (c Charge) ChangeID() string {
	_, id, ok := strings.Cut(c.PeriodKey, adjMark)
	if !ok {
		return ""
	}
	return id
}

// adjMark separates an adjustment charge's period key from its change id:
// <period key>:adj:<change id>.
const adjMark = ":adj:"

// LedgerOp is one operation a gateway recorded
// (GET /v1/dev/gateways/{name}/ledger).
type LedgerOp struct {
	Gateway        string
	Op             string // authorize, capture, void, refund
	IdempotencyKey string // <charge key>:a<attempt>:<phase>, or <charge key>:r<n>:refund
	Reference      string
	TokenLast4     string
	Amount         int64
	Currency       string
	Status         string // succeeded, declined, failed
	DeclineCode    string
	At             time.Time // the gateway's real time
}

// ChargeKey, Attempt and Phase split the idempotency key; ok is false for
// a key rebill would not write.
func (o LedgerOp) split() (chargeKey string, attempt int, phase string, ok bool) {
	i := strings.LastIndexByte(o.IdempotencyKey, ':')
	if i < 0 {
		return "", 0, "", false
	}
	phase = o.IdempotencyKey[i+1:]
	rest := o.IdempotencyKey[:i]
	j := strings.LastIndexByte(rest, ':')
	if j < 0 || j+2 > len(rest) || rest[j+1] != 'a' {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(rest[j+2:])
	if err != nil {
		return "", 0, "", false
	}
	return rest[:j], n, phase, true
}

// ChargeKey is the charge key the operation belongs to ("" if unknown).
func (o LedgerOp) ChargeKey() string { k, _, _, _ := o.split(); return k }

// Attempt is the business attempt the operation belongs to (0 if unknown).
func (o LedgerOp) Attempt() int { _, a, _, _ := o.split(); return a }

// Observations are what the soak's driver recorded in real time (the
// machine's wall clock, which the simulated gateways also stamp their
// ledgers with). Intervals [Sent, Answered] bound when a request took
// effect: it committed somewhere inside.
type Observations struct {
	// Subscriptions by id.
	Subscriptions map[string]*ObservedSubscription
	// ClockMoves are the dev clock's moves, in order.
	ClockMoves []ClockMove
}

// ObservedSubscription is one subscription as its driver saw it.
type ObservedSubscription struct {
	// Created is the create request; its card is Cards[0].
	Created Interval
	// Anchor is the billing_anchor the create answered: the first grid's.
	Anchor time.Time
	// Cards are the payment methods given, oldest first: at creation and
	// every card change that answered 200 (and, with Unsure, one whose
	// answer never came).
	Cards []ObservedCard
	// Pauses are the pauses that answered 200 with the subscription paused.
	Pauses []ObservedPause
	// Resumes are the resumes that answered 200, with the billing anchor
	// they answered.
	Resumes []ObservedResume
	// Cancels are the immediate cancels that answered 200, each with the
	// subscription's charges as read right after the answer.
	Cancels []ObservedCancel
	// UnpaidSince are the values of the subscription's unpaid_since seen
	// in the database (when its dunning ended), in the order seen.
	UnpaidSince []time.Time
	// Resolves are the resolutions a person made that answered 200.
	Resolves []ObservedResolve
	// Updates are the updates that answered 200, and TrialEnds the trials
	// a person ended.
	Updates   []ObservedUpdate
	TrialEnds []ObservedTrialEnd
}

// ObservedUpdate is an update that answered 200: what was asked, the
// service clock meanwhile (the dev clock stands still between its moves,
// which run alone), and the terms the answer showed.
type ObservedUpdate struct {
	When      Interval
	Clock     time.Time
	Effective string
	Proration string
	// Amount and Interval asked (zero: unchanged).
	Amount   int64
	Interval string
	Count    int
	// Answered terms, and the pending update's effective_at (nil: none).
	AmountAfter   int64
	IntervalAfter string
	PendingAt     *time.Time
}

// ObservedTrialEnd is a person's end of a trial that answered 200.
type ObservedTrialEnd struct {
	When          Interval
	Clock         time.Time
	BillingAnchor time.Time
}

// ObservedResolve is a person's resolution of a charge in review.
type ObservedResolve struct {
	ChargeID string
	Outcome  string // succeeded or failed
	When     Interval
	Clock    time.Time // the service clock meanwhile
}

// Interval is a stretch of real time.
type Interval struct{ Sent, Answered time.Time }

// ObservedCard is a payment method and when it was given.
type ObservedCard struct {
	Gateway     string
	Token       string
	Last4       string // the token's last four characters, as the ledger shows them
	Good        bool   // a token that authorizes (ok, lost_response, flaky)
	Same        bool   // the same card sent again (no change, a "try again")
	Unsure      bool   // the change's answer never came: it may or may not have happened
	When        Interval
	StatusAfter string // the subscription's status the answer showed
}

// ObservedPause is a pause and its resume_at.
type ObservedPause struct {
	When     Interval
	At       time.Time // the service clock: paused_at from the answer
	ResumeAt *time.Time
	// OnResume is what the resume does: start_new_period or
	// continue_period.
	OnResume string
}

// ObservedResume is a resume's answer.
type ObservedResume struct {
	When          Interval
	BillingAnchor time.Time
}

// ObservedCancel is an immediate cancel and what the charges were right
// after it.
type ObservedCancel struct {
	When Interval
	// Charges after the cancel: charge id -> state.
	Charges map[string]ChargeState
	// Read is when Charges were read (after When.Answered).
	Read time.Time
}

// ChargeState is a charge's status at one moment.
type ChargeState struct {
	Key          string
	Status       string
	Attempt      int
	UnknownPhase string
}

// ClockMove is one move of the dev clock: the time before and after, and
// when in real time.
type ClockMove struct {
	When     Interval
	From, To time.Time
}

// Describe renders one subscription's record (events, charges, the
// ledger's operations for it, and what the driver observed) for a report.
func Describe(d *Data, id string) string {
	var b strings.Builder
	var sub *Subscription
	for i := range d.Subscriptions {
		if d.Subscriptions[i].ID == id {
			sub = &d.Subscriptions[i]
		}
	}
	if sub == nil {
		return "subscription " + id + ": not in the data\n"
	}
	fmt.Fprintf(&b, "subscription %s: %s, every %d %s in %s, anchor %s, cancel_at_period_end %t, cancelled_at %v, amount %d\n",
		sub.ID, sub.Status, sub.IntervalCount, sub.Interval, sub.TimeZone, fmtT(sub.BillingAnchor), sub.CancelAtPeriodEnd,
		sub.CancelledAt, sub.Amount)
	b.WriteString("  events:\n")
	for _, e := range sub.Events {
		fmt.Fprintf(&b, "    %d %s %s %s->%s by %s/%s\n", e.ID, fmtT(e.At), e.Type, e.From, e.To, e.ActorRole, e.ActorID)
	}
	var moves []ClockMove
	if d.Observed != nil {
		moves = d.Observed.ClockMoves
	}
	obs := observed(d, id)
	tl := BuildTimeline(*sub, obs, moves)
	b.WriteString("  periods:\n")
	for _, p := range tl.Periods(d.Now, moves) {
		fmt.Fprintf(&b, "    %s grid %d %s (began while %s) due from %s\n", fmtT(p.Start), p.Segment, p.Owed,
			joinStatuses(p.Statuses), p.DueFrom.Format("15:04:05.000"))
	}
	l := indexLedger(d.Ledger)
	b.WriteString("  charges:\n")
	for _, c := range sub.Charges {
		na := ""
		if c.NextAttemptAt != nil {
			na = " next " + fmtT(*c.NextAttemptAt)
		}
		fmt.Fprintf(&b, "    %s start %s %s a%d code=%q review=%q resolution=%q%s\n", c.PeriodKey, fmtT(c.PeriodStart), c.Status,
			c.AttemptCount, c.FailureCode, c.ReviewReason, c.Resolution, na)
		for _, o := range l.byCharge[c.Key] {
			fmt.Fprintf(&b, "      %s %s a%d %s %s …%s %s\n", o.At.Format("15:04:05.000"), o.Gateway, o.Attempt(), o.Op, o.Status,
				o.TokenLast4, o.DeclineCode)
		}
	}
	if obs != nil {
		b.WriteString("  observed:\n")
		fmt.Fprintf(&b, "    created %s..%s anchor %s\n", obs.Created.Sent.Format("15:04:05.000"), obs.Created.Answered.Format("15:04:05.000"), fmtT(obs.Anchor))
		for _, c := range obs.Cards {
			fmt.Fprintf(&b, "    card %s/…%s good=%t same=%t unsure=%t %s..%s -> %s\n", c.Gateway, c.Last4, c.Good, c.Same, c.Unsure,
				c.When.Sent.Format("15:04:05.000"), c.When.Answered.Format("15:04:05.000"), c.StatusAfter)
		}
		for _, p := range obs.Pauses {
			fmt.Fprintf(&b, "    pause %s..%s at %s resume_at %v\n", p.When.Sent.Format("15:04:05.000"), p.When.Answered.Format("15:04:05.000"), fmtT(p.At), p.ResumeAt)
		}
		for _, r := range obs.Resumes {
			fmt.Fprintf(&b, "    resume %s..%s anchor %s\n", r.When.Sent.Format("15:04:05.000"), r.When.Answered.Format("15:04:05.000"), fmtT(r.BillingAnchor))
		}
		for _, c := range obs.Cancels {
			fmt.Fprintf(&b, "    cancel %s..%s charges then: %v\n", c.When.Sent.Format("15:04:05.000"), c.When.Answered.Format("15:04:05.000"), c.Charges)
		}
		for _, u := range obs.UnpaidSince {
			fmt.Fprintf(&b, "    unpaid_since %s\n", fmtT(u))
		}
		for _, r := range obs.Resolves {
			fmt.Fprintf(&b, "    resolved %s %s at %s (%s)\n", r.ChargeID, r.Outcome, fmtT(r.Clock), r.When.Sent.Format("15:04:05.000"))
		}
	}
	return b.String()
}
