package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/metrics"
)

// A bill's charge is a period's charge owned by an enrollment: its period
// key is the bill's id, unique per enrollment, and it runs through the
// same pipeline. What differs is the price of a fine, which rises at its
// discount deadline (Charge.FullAmount, Charge.DiscountUntil).

// An attempt of a fine is priced when its hold is first sent: at the
// discounted price only while that hold can still be posted to the
// registry and captured before the discount ends, that is before its last
// discounted start, PostingDiscountMargin before the discount's end. A
// hold at the discounted price started later could not be posted in time
// and would only be voided unposted; such an attempt is at the full price.

// fullPriceSQL holds for a charge whose attempt starting at $1 is at its
// full price: $1 is at or after its last discounted start.
var fullPriceSQL = fmt.Sprintf(`discount_until - interval '%d microseconds' <= $1`, PostingDiscountMargin.Microseconds())

// repriceSQL is the assignment, in the guarded move that starts a first
// authorize call ($1 the time, $2 the scheduled status), that fixes the
// attempt's amount: the full price from the last discounted start on. A
// rerun of an attempt already sent keeps its amount, and so its gateway
// request.
var repriceSQL = `amount = CASE WHEN status = $2 AND ` + fullPriceSQL + ` THEN full_amount ELSE amount END`

// startableSQL holds, in the guarded move that starts a first authorize
// call ($1 the time, $2 the scheduled status), for a charge whose new
// attempt may be sent: its price at $1 is within what the customer
// allowed (the cap, or the amount they confirmed) and no confirmation is
// awaited, and its bill's last moment to start an attempt has not come.
// A rerun of an attempt already sent is not held back: its call may have
// reached the gateway, and it keeps the amount it was sent for.
var startableSQL = `(status <> $2 OR (NOT confirmation_required AND ` + withinCapSQL + ` AND (pay_until IS NULL OR $1 < pay_until)))`

// withinCapSQL holds for a charge whose price at $1 is within what may be
// taken without asking.
var withinCapSQL = `(max_amount IS NULL OR ` + priceSQL + ` <= GREATEST(max_amount, coalesce(confirmed_amount, 0)))`

// priceSQL is a scheduled charge's price at $1: what a hold sent then is
// placed for.
var priceSQL = `(CASE WHEN ` + fullPriceSQL + ` THEN full_amount ELSE amount END)`

// discountMissedSQL holds for a charge at the lower price of a discount
// that has ended at $1: its hold must not be captured.
const discountMissedSQL = `(discount_until IS NOT NULL AND amount < full_amount AND discount_until <= $1)`

// NewBillCharge is the charge of one bill.
type NewBillCharge struct {
	EnrollmentID uuid.UUID
	CustomerID   string
	BillID       string
	// Due is when the bill is paid (its period start).
	Due      time.Time
	Amount   int64
	Currency string
	Gateway  string
	Token    string
	// FullAmount and DiscountUntil, when set, make Amount a discounted
	// price that ends at DiscountUntil.
	FullAmount    int64
	DiscountUntil *time.Time
	// RegistryUIN, when set, has each hold posted to the state payment
	// registry under it before the capture (see Postings).
	RegistryUIN string
	// PaidOutside is what is known paid against the bill outside rebill:
	// Amount and FullAmount are net of it.
	PaidOutside int64
	// SourcePaid is what the bill's source last reported paid against a
	// fine (Charge.SourcePaid).
	SourcePaid int64
	// MaxAmount caps what an attempt may be sent for without asking;
	// ConfirmedAmount is what the customer confirmed above it (0: none).
	MaxAmount       int64
	ConfirmedAmount int64
	// PayUntil is the bill's last moment to start an attempt.
	PayUntil time.Time
	// Identity, when set, is what the bill is paid for whichever
	// enrollment carries it: the charge claims it on insert, and no other
	// charge may hold it until it is released.
	Identity string
	// DocumentIdentity, when set, is the bill's second identity (its
	// payment document), claimed and released with Identity.
	DocumentIdentity string
	// Receipt, when set, is the bill's fiscal receipt (gateway.Receipt as
	// JSON) with its one item, the bill: its hold and capture carry it,
	// priced at the attempt's amount, and a refund its refund receipt.
	Receipt []byte
}

// ErrIdentityHeld: another enrollment's charge holds the bill's identity
// (see IdentityHeldError).
var ErrIdentityHeld = errors.New("another charge holds the bill's identity")

// IdentityHeldError names the charge, and its enrollment, that holds a
// bill's identity.
type IdentityHeldError struct {
	ChargeID     uuid.UUID
	EnrollmentID uuid.UUID
}

func (e *IdentityHeldError) Error() string {
	return fmt.Sprintf("%s: charge %s of enrollment %s", ErrIdentityHeld, e.ChargeID, e.EnrollmentID)
}

// Unwrap makes errors.Is(err, ErrIdentityHeld) hold.
func (e *IdentityHeldError) Unwrap() error { return ErrIdentityHeld }

// CreateForBill creates the charge of a bill, or returns the one it has
// (created false): one charge per enrollment and bill id, whoever asks.
// A new charge claims n.Identity (and n.DocumentIdentity, when set): when
// another charge holds either, nothing
// is created and the error is a *IdentityHeldError. Two transactions
// inserting one identity serialise on the unique index (the second waits
// for the first to commit, then finds it); callers inserting several
// insert them in identity order, so that two of them cannot deadlock.
// A new charge's authorize job is enqueued in tx with it.
func (s *Store) CreateForBill(ctx context.Context, tx pgx.Tx, n NewBillCharge, now time.Time) (Charge, bool, error) {
	for range 3 {
		c, created, err := createForBill(ctx, tx, n, now)
		if errors.Is(err, errIdentityReleased) {
			continue
		}
		if err != nil || !created {
			return c, created, err
		}
		return c, true, s.start(ctx, tx, []Charge{c})
	}
	return Charge{}, false, fmt.Errorf("bill %s: its identity changed hands three times while being claimed", n.BillID)
}

// errIdentityReleased: the insert met an identity's holder that let go of
// it before it could be named; the insert is tried again.
var errIdentityReleased = errors.New("bill identity released meanwhile")

func createForBill(ctx context.Context, tx pgx.Tx, n NewBillCharge, now time.Time) (Charge, bool, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Charge{}, false, fmt.Errorf("new charge id: %w", err)
	}
	var full *int64
	if n.DiscountUntil != nil {
		full = &n.FullAmount
	}
	var uin *string
	if n.RegistryUIN != "" {
		uin = &n.RegistryUIN
	}
	var identity *string
	if n.Identity != "" {
		identity = &n.Identity
	}
	// No conflict target: a conflict on the bill's key or on its
	// identity both insert nothing, and which one it was is looked up.
	c, err := scan(tx.QueryRow(ctx, `INSERT INTO charges (id, enrollment_id, customer_id, period_key, period_start, amount,
			currency, gateway, pm_token, status, created_at, updated_at, attempt_due_at, attempt_times, full_amount, discount_until,
			registry_uin, max_amount, confirmed_amount, pay_until, bill_identity, identity_held, paid_outside, source_paid,
			document_identity, receipt)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $11, ARRAY[$11::timestamptz], $12, $13, $14, $15, $16, $17,
			$18::text, $18::text IS NOT NULL, $19, $20, NULLIF($21, ''), $22::text::jsonb)
		ON CONFLICT DO NOTHING
		RETURNING `+columns, id, n.EnrollmentID, n.CustomerID, n.BillID, n.Due, n.Amount, n.Currency, n.Gateway, n.Token,
		string(Scheduled), now, full, n.DiscountUntil, uin, nonZero(n.MaxAmount), nonZero(n.ConfirmedAmount), payUntil(n.PayUntil),
		identity, n.PaidOutside, n.SourcePaid, n.DocumentIdentity, receiptText(n.Receipt)))
	if errors.Is(err, ErrNotFound) {
		existing, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM charges WHERE enrollment_id = $1 AND period_key = $2`,
			n.EnrollmentID, n.BillID))
		if !errors.Is(err, ErrNotFound) || identity == nil {
			return existing, false, err
		}
		held := &IdentityHeldError{}
		err = tx.QueryRow(ctx, `SELECT id, enrollment_id FROM charges
			WHERE (bill_identity = $1 OR document_identity = NULLIF($2, '')) AND identity_held ORDER BY id LIMIT 1`,
			n.Identity, n.DocumentIdentity).Scan(&held.ChargeID, &held.EnrollmentID)
		if errors.Is(err, pgx.ErrNoRows) {
			return Charge{}, false, errIdentityReleased
		}
		if err != nil {
			return Charge{}, false, fmt.Errorf("holder of bill identity: %w", err)
		}
		return Charge{}, false, held
	}
	if err != nil {
		return Charge{}, false, fmt.Errorf("insert bill charge: %w", err)
	}
	return c, true, nil
}

// receiptText is a receipt as an insert takes it: NULL when none.
func receiptText(r []byte) *string {
	if r == nil {
		return nil
	}
	return new(string(r))
}

func nonZero(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func payUntil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// ListByEnrollment returns an enrollment's charges newest first, before
// the keyset cursor id (uuid.Nil for the first page).
func ListByEnrollment(ctx context.Context, db DBTX, enrollmentID, before uuid.UUID, limit int) ([]Charge, error) {
	var cursor *uuid.UUID
	if before != uuid.Nil {
		cursor = &before
	}
	return collect(db.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE enrollment_id = $1 AND ($2::uuid IS NULL OR id < $2) ORDER BY id DESC LIMIT $3`, enrollmentID, cursor, limit))
}

// requestBillVoid stops the charges of an enrollment (all of them, or the
// one with id chargeID when it is not uuid.Nil) from taking money: those
// no attempt works on are voided at once with code; those that may hold
// money are flagged so that no capture starts, and returned, remembering
// code as the reason their void will record. A capture in flight finishes.
func (s *Store) requestBillVoid(ctx context.Context, tx pgx.Tx, enrollmentID, chargeID uuid.UUID, code string, now time.Time) ([]Charge, error) {
	var one *uuid.UUID
	if chargeID != uuid.Nil {
		one = &chargeID
	}
	if _, err := s.move(ctx, tx, transition{from: []Status{Scheduled, Declined}, to: Voided, set: "failure_code = $3"}, now,
		matching("enrollment_id = $1 AND ($2::uuid IS NULL OR charges.id = $2)"), enrollmentID, one, code); err != nil {
		return nil, fmt.Errorf("void waiting bill charges: %w", err)
	}
	return collect(tx.Query(ctx, `UPDATE charges SET void_requested = true, void_reason = $5, updated_at = $3
		WHERE enrollment_id = $1 AND ($2::uuid IS NULL OR id = $2) AND status = ANY($4) AND NOT void_requested
		RETURNING `+columns, enrollmentID, one, now, texts([]Status{Authorizing, Authorized, Unknown}), code))
}

// EnrollmentPaymentMethodChanged is PaymentMethodChanged for an
// enrollment's bill charges: those of bills still payable (the ids in
// payable) are retried.
func (s *Store) EnrollmentPaymentMethodChanged(ctx context.Context, tx pgx.Tx, enrollmentID uuid.UUID, payable []uuid.UUID, gateway, token string,
	now time.Time) ([]Charge, error) {
	if payable == nil {
		payable = []uuid.UUID{}
	}
	return s.paymentMethodChanged(ctx, tx, "enrollment_id", enrollmentID, payable, gateway, token, now)
}

// discountReleased records the void of a hold placed at a discounted price
// that was not captured before the discount ended, or of a fine's hold
// that could no longer be posted to the registry in time: the charge waits
// (declined) for a new attempt, which the scan starts with a new key, due:
//   - now, at the full price, once the discount has ended;
//   - at the discount's end, for a discounted hold released at or after
//     its last discounted start: an attempt before then would be at the
//     full price while the discount still holds;
//   - otherwise (the hold about to lapse at its gateway, a discounted one
//     too while its last discounted start has not come) now, priced when
//     it starts, or as soon as the card networks' bound on attempts allows
//     (FailureHoldExpired); its hold waits until the registry has settled
//     the old attempt's posting (priorPostingsSettledSQL).
//
// A cancel or withdrawal that asked for the void meanwhile wins: the
// charge is voided.
func (p *Pipeline) discountReleased(ctx context.Context, tx pgx.Tx, c Charge, now time.Time) error {
	code, at := FailureDiscountEnded, now
	switch {
	case c.outsideRecheck:
		code = FailurePaidOutsideChanged
	case c.discountMissed(now):
	case c.DiscountUntil != nil && c.Amount < c.FullAmount && !now.Before(c.lastDiscountedStart()):
		at = *c.DiscountUntil
	default:
		code, at = FailureHoldExpired, c.sameCardAttemptAt(now)
	}
	next, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Authorized}, to: Declined,
		where: "NOT void_requested", set: `failure_code = $2, next_attempt_at = $3, first_declined_at = coalesce(first_declined_at, $1),
			outside_recheck = false`}, now, byID(c.ID, c.AttemptCount, ""), now, code, at))
	if errors.Is(err, ErrStale) {
		next, err = oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Authorized}, to: Voided,
			set: `failure_code = ` + billVoidCodeSQL}, now,
			byID(c.ID, c.AttemptCount, "")))
	}
	if err == nil {
		p.transitioned(next, "the hold was released before its capture: "+code)
	}
	return err
}

// billVoidCodeSQL is the failure code of a bill's charge voided at its
// owner's request: the reason the owner gave.
const billVoidCodeSQL = `coalesce(void_reason, 'enrollment_cancelled')`

// BillOwner is the owner of charges with a cap and a last moment to start
// (an enrollment's bills), told in the transaction that records it, its
// row locked first (Owner.Lock), when the start of an attempt was
// held back.
type BillOwner interface {
	// ConfirmationRequired: c's new attempt would be sent above what the
	// customer allowed; it waits, scheduled and flagged, for Confirm.
	ConfirmationRequired(ctx context.Context, tx pgx.Tx, c Charge) error
	// ChargeExpired: c was voided (bill_expired) because its last moment
	// to start an attempt came before the attempt started.
	ChargeExpired(ctx context.Context, tx pgx.Tx, c Charge) error
	// PaidOutside: c's bill was paid outside rebill, c.PaidOutside so
	// far; inFull: that covers its price, and c was voided
	// (FailurePaidElsewhere).
	PaidOutside(ctx context.Context, tx pgx.Tx, c Charge, inFull bool) error
}

// overCap reports whether c's new attempt, starting at now, would be sent
// above what may be taken without asking.
func (c Charge) overCap(now time.Time) bool {
	if c.MaxAmount == 0 {
		return false
	}
	price := c.Amount
	if c.DiscountUntil != nil && !now.Before(c.lastDiscountedStart()) {
		price = c.FullAmount
	}
	return price > max(c.MaxAmount, c.ConfirmedAmount)
}

// lastDiscountedStart is the last moment an attempt of c, a charge with a
// discount, starts at the discounted price (see fullPriceSQL).
func (c Charge) lastDiscountedStart() time.Time {
	return c.DiscountUntil.Add(-PostingDiscountMargin)
}

// heldBack handles an authorize step of c's scheduled attempt whose guard
// held it back for its price or its bill's last moment, and reports
// whether it did: the charge is flagged to await the customer's
// confirmation (repriced, so that it shows what would be taken), or
// voided as expired, and its owner told, in one transaction with the
// owner's row locked first. Nothing is sent to the gateway.
func (p *Pipeline) heldBack(ctx context.Context, s stageRun, c Charge) (bool, error) {
	now := p.Clock.Now()
	expired := c.PayUntil != nil && !now.Before(*c.PayUntil)
	if c.Status != Scheduled || c.AttemptCount != s.attempt || c.VoidRequested || c.ConfirmationRequired ||
		(!expired && !c.overCap(now)) {
		return false, nil
	}
	owner, ok := p.Owners.Of(c).(BillOwner)
	if !ok {
		return false, nil
	}
	err := p.record(ctx, s, func(tx pgx.Tx) error {
		if _, err := p.Owners.Of(c).Lock(ctx, tx, c.OwnerID()); err != nil {
			return err
		}
		if expired {
			next, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Scheduled}, to: Voided,
				set: `failure_code = 'bill_expired'`}, now,
				byID(c.ID, c.AttemptCount, "")))
			if err != nil {
				return err
			}
			p.transitioned(next, "the bill's last moment to start an attempt passed")
			return owner.ChargeExpired(ctx, tx, next)
		}
		next, err := oneMoved(p.Store.move(ctx, tx, transition{from: []Status{Scheduled}, to: Scheduled,
			where: `NOT void_requested AND NOT confirmation_required AND NOT ` + withinCapSQL,
			set:   `confirmation_required = true, amount = ` + priceSQL}, now, byID(c.ID, c.AttemptCount, ""), now))
		if err != nil {
			return err
		}
		return owner.ConfirmationRequired(ctx, tx, next)
	})
	return err == nil, err
}

// Confirm records the customer's confirmation of a bill's charge that
// awaits one: it may be sent for up to amount (the bill's amount due at
// the confirmation), the flag is cleared, and a new attempt starts (the
// held-back one's authorize job has run; nothing was sent under its key)
// with its authorize job enqueued in tx. A price above amount later needs
// a new confirmation. Returns ErrStale when the charge awaits no
// confirmation.
func (s *Store) Confirm(ctx context.Context, tx pgx.Tx, id uuid.UUID, amount int64, now time.Time) (Charge, error) {
	c, err := oneMoved(s.move(ctx, tx, transition{from: []Status{Scheduled}, to: Scheduled, where: "confirmation_required",
		set: newAttempt + `, confirmed_amount = $3, confirmation_required = false`}, now, byID(id, 0, ""), now, now, amount))
	if err != nil {
		return Charge{}, err
	}
	return c, s.start(ctx, tx, []Charge{c})
}

// Postings posts the holds of charges with a RegistryUIN to the state
// payment registry before they are captured: the registry is told only of
// money that is held. The pipeline calls Held, in the transaction that
// records the hold, instead of enqueueing the capture; the posting side
// enqueues the capture (HoldPosted) once the registry accepted the
// payment, or sends the charge to review (HoldRefused) when it never does.
type Postings interface {
	Held(ctx context.Context, tx pgx.Tx, c Charge) error
}

// FailureDiscountEnded is the failure code of an attempt at the discounted
// price whose hold was released because the discount ended (or was about
// to) before its capture; the next attempt is at the full price.
const FailureDiscountEnded = "discount_ended"

// discountEndedInFlight settles c, capturing or with its capture's outcome
// unknown, whose discount ended meanwhile: the capture may have been sent,
// so the attempt is looked up by its keys first (never replayed: no
// capture is sent late). Captured: it succeeded at the discounted price,
// and its registry posting stands. Proven not captured: the hold is
// voided and a new attempt starts, repriced in full by the authorize's
// guard; the sweep annuls the old attempt's posting. No answer: review,
// which releases the hold; never a new attempt while money may be live.
func (p *Pipeline) discountEndedInFlight(ctx context.Context, s stageRun, c Charge) error {
	metrics.StageRuns.WithLabelValues(s.stage, "discount_missed").Inc()
	g, err := p.Gateways.Gateway(c.Gateway)
	if err != nil {
		return p.review(ctx, s, c, ReviewGatewayNotConfigured, err.Error())
	}
	from := []Status{c.Status}
	res, err := p.call(ctx, c, gateway.OpCapture, func(ctx context.Context) (gateway.Result, error) {
		return p.lookup(ctx, g, c, gateway.OpCapture, false)
	})
	switch {
	case errors.Is(err, gateway.ErrNotFound):
	case errors.Is(err, gateway.ErrUnprovable):
		return p.review(ctx, s, c, ReviewOutcomeUnprovable, fmt.Sprintf("the discount of attempt %d ended while its capture was under way and %s can no longer tell whether it happened", c.AttemptCount, c.Gateway))
	case err != nil:
		return p.technicalFailure(ctx, s, c, gateway.OpCapture, err)
	case res.Status == gateway.StatusSucceeded:
		return p.afterCapture(ctx, s, c, from, res, nil)
	}
	res, err = p.call(ctx, c, gateway.OpVoid, func(ctx context.Context) (gateway.Result, error) {
		return g.Void(ctx, p.request(c, gateway.OpVoid))
	})
	if err != nil {
		return p.technicalFailure(ctx, s, c, gateway.OpVoid, err)
	}
	if res.Status != gateway.StatusSucceeded {
		return p.review(ctx, s, c, ReviewVoidRefused, fmt.Sprintf("the gateway refused to void a hold whose discount ended: %s %s", res.Status, res.DeclineCode))
	}
	return p.reauthorize(ctx, s, c, from, FailureDiscountEnded, "the discount ended before the capture; hold voided")
}
