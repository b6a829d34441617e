// Package autopay charges the bills of autopay enrollments on the charges
// pipeline. It composes enrollments (bills, their rules) and charges (the
// exactly-once engine) the way renewals composes subscriptions and
// charges: a bill is a period whose key is `<enrollment_id>:<bill_id>`.
//
// # Where bills come from
//
// Bills are pushed through the API (Push) or pulled by a periodic River
// job from each kind's BillSource (Pull). Both end in Push, which stores
// one bill per enrollment and bill id, so the same bill from both paths,
// or from twenty concurrent pushes, is one bill with one charge.
//
// # When bills are charged
//
// A bill is charged when its pay_at comes (the Scan job, and at once when
// it is due on arrival): its charge is created under the bill's unique key
// in the transaction that moves the bill to paying, with its authorize job.
// The charge's outcome comes back through Outcomes (paid, failed), which
// the pipeline calls with the enrollment's row locked first, like a
// subscription's.
package autopay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/pg"
)

// Autopay charges bills.
type Autopay struct {
	Pool        *pgxpool.Pool
	Enrollments *enrollments.Store
	Clock       clock.Clock
	Rules       enrollments.Rules
	// Charges writes the charges' moves, publishes their events and
	// enqueues their jobs.
	Charges   *charges.Store
	Sources   map[enrollments.Kind]BillSource
	BatchSize int
	// Registry: a state payment registry is configured, so fines may be
	// charged (each is posted before its capture). Without one, fines
	// enrollments are refused and fines' bills await one.
	Registry bool
	// Postings tells whether a payment of rebill's for a fine may stand
	// at the registry (charges.Poster); set with Registry.
	Postings OwnPostings
	// Receipts sends the 54-FZ receipts of the kinds of bill it names.
	Receipts BillReceipts
	Logger   zerolog.Logger
}

// OwnPostings knows rebill's own postings of fines to the state payment
// registry.
type OwnPostings interface {
	// OwnPaymentMayStand: one of rebill's postings of the fine uin is
	// open or accepted.
	OwnPaymentMayStand(ctx context.Context, db pg.DBTX, uin string) (bool, error)
}

// ErrRegistryNotConfigured: a fines enrollment cannot be created, because
// no state payment registry is configured to post its fines to.
var ErrRegistryNotConfigured = fault.New(fault.Conflict, "no state payment registry is configured: fines cannot be paid")

// Push stores a bill for the enrollment (its row locked in tx first, so
// that concurrent pushes of one bill serialise) and, when it is due at
// once, creates its charge in tx. Returns the bill and whether this call
// created it; rebilltype.Errors for a bad bill; enrollments.ErrBillConflict
// when the bill id exists with other content; a
// *fsm.TransitionError for a cancelled enrollment.
func (a *Autopay) Push(ctx context.Context, tx pgx.Tx, enrollmentID uuid.UUID, in enrollments.BillInput) (enrollments.Bill, bool, error) {
	e, err := a.Enrollments.GetForUpdate(ctx, tx, enrollmentID)
	if err != nil {
		return enrollments.Bill{}, false, err
	}
	in = in.Canonical()
	// A bill already stored is answered from the store before the bill is
	// validated: one accepted under an older rule (a UIN check digit
	// computed differently) replays instead of turning into a 400.
	_, err = a.Enrollments.GetBill(ctx, tx, e.ID, in.BillID)
	switch {
	case errors.Is(err, enrollments.ErrBillNotFound):
		if err := in.ValidateFor(e.Kind, e.AccountRef, a.Clock.Now()); err != nil {
			return enrollments.Bill{}, false, err
		}
	case err != nil:
		return enrollments.Bill{}, false, err
	}
	b, created, err := a.Enrollments.Push(ctx, tx, e, in, a.Rules)
	if err != nil || !created {
		return b, created, err
	}
	b, err = a.ChargeIfDue(ctx, tx, e, b)
	return b, true, err
}

// byIdentity orders bills by their identities: a transaction that claims
// several claims them in this order, so that two cannot deadlock on the
// identity index. A bill with a payment document is ordered by its
// document's identity, which its copies under other bill ids share, so
// that two transactions claiming copies of it meet there first. (A
// charge's two claims are checked in the indexes' order, not this one: a
// deadlock that ordering leaves possible, across two documents each
// claimed in both transactions, is broken by PostgreSQL failing one
// transaction, whose work is done again.)
func byIdentity(bills []enrollments.Bill) {
	key := func(b enrollments.Bill) string {
		if b.DocumentIdentity != "" {
			return b.DocumentIdentity
		}
		return b.Identity
	}
	slices.SortStableFunc(bills, func(x, y enrollments.Bill) int { return strings.Compare(key(x), key(y)) })
}

// ChargeIfDue creates the charge of a scheduled bill whose pay_at has come
// and enqueues its authorize job, in tx (the enrollment's row locked by
// the caller); other bills are returned unchanged.
func (a *Autopay) ChargeIfDue(ctx context.Context, tx pgx.Tx, e enrollments.Enrollment, b enrollments.Bill) (enrollments.Bill, error) {
	now := a.Clock.Now()
	if b.Status != enrollments.BillScheduled || b.PayAt.After(now) || e.Status != enrollments.Active {
		return b, nil
	}
	return a.charge(ctx, tx, e, b, now)
}

func (a *Autopay) charge(ctx context.Context, tx pgx.Tx, e enrollments.Enrollment, b enrollments.Bill, now time.Time) (enrollments.Bill, error) {
	if e.Kind == enrollments.Fines && !a.Registry {
		return a.Enrollments.AwaitRegistry(ctx, tx, b.ID)
	}
	n := charges.NewBillCharge{EnrollmentID: e.ID, CustomerID: e.CustomerID, BillID: b.BillID, Due: b.PayAt,
		Amount: b.Amount, Currency: e.Currency, Gateway: e.PaymentMethod.Gateway, Token: e.PaymentMethod.Token,
		MaxAmount: e.MaxAmount, PayUntil: a.Rules.LastStart(b.ExpiresAt),
		Identity: b.Identity, DocumentIdentity: b.DocumentIdentity}
	if b.ConfirmedAmount != nil {
		n.ConfirmedAmount = *b.ConfirmedAmount
	}
	if e.Kind == enrollments.Fines {
		n.RegistryUIN = b.BillID // a fine is paid once posted to the state registry under its UIN
		n.SourcePaid = b.SourcePaid
	}
	if ends := b.DiscountEnds(); ends != nil && now.Before(*ends) {
		n.Amount, n.FullAmount, n.DiscountUntil = *b.DiscountedAmount, b.Amount, ends
	}
	if b.PaidOutside > 0 {
		if b.AmountDue(now) == 0 {
			// What was reported paid elsewhere covers the price now.
			b, _, err := a.Enrollments.SourcePaid(ctx, tx, b, b.PaidOutside)
			return b, err
		}
		n.PaidOutside, n.Amount = b.PaidOutside, n.Amount-b.PaidOutside
		if n.DiscountUntil != nil {
			n.FullAmount -= b.PaidOutside
		}
	}
	if a.Receipts.Kinds[e.Kind] && e.ReceiptCustomer == nil {
		a.Logger.Warn().Str("enrollment_id", e.ID.String()).Str("bill_id", b.BillID).
			Msg("the enrollment names no receipt_customer: its payment carries no receipt of rebill's")
	}
	if in, ok := a.Receipts.Input(e, b, n.Amount); ok {
		var err error
		if n.Receipt, err = a.Receipts.Receipt(in); err != nil {
			return enrollments.Bill{}, err
		}
	}
	c, _, err := a.Charges.CreateForBill(ctx, tx, n, now)
	var held *charges.IdentityHeldError
	if errors.As(err, &held) {
		// Another enrollment's copy of this bill is being paid: this one
		// is not.
		return a.Enrollments.Duplicate(ctx, tx, b, held.EnrollmentID)
	}
	if err != nil {
		return enrollments.Bill{}, err
	}
	b, err = a.Enrollments.Charging(ctx, tx, b.ID, c.ID)
	if err != nil {
		return enrollments.Bill{}, fmt.Errorf("bill %s to paying: %w", n.BillID, err)
	}
	return b, nil
}

// voidCharges stops the charges of bills (those that have one) from taking
// money, for the reason code, and enqueues the voids of their holds.
func (a *Autopay) voidCharges(ctx context.Context, tx pgx.Tx, bills []enrollments.Bill, code string) error {
	for _, b := range bills {
		if b.ChargeID == nil {
			continue
		}
		if err := a.Charges.StopBills(ctx, tx, b.EnrollmentID, *b.ChargeID, code, a.Clock.Now()); err != nil {
			return err
		}
	}
	return nil
}

// sourceReported records what a fine's source reports paid against it
// (paid), in tx with the enrollment locked. The figure may include
// rebill's own payment and names no payment, so it counts for nothing by
// itself: the registry stays the judge (charges.SourceReported), and the
// bill becomes paid_elsewhere only on the registry's word. It is ignored
// for a bill no longer open, and while one of rebill's postings of the
// fine may stand at the registry (it may be that payment).
func (a *Autopay) sourceReported(ctx context.Context, tx pgx.Tx, b enrollments.Bill, paid int64) error {
	if paid == b.SourcePaid {
		return nil
	}
	switch b.Status {
	case enrollments.BillPaid, enrollments.BillPaidElsewhere, enrollments.BillWithdrawn, enrollments.BillExpired:
		return nil
	}
	if a.Postings != nil {
		if own, err := a.Postings.OwnPaymentMayStand(ctx, tx, b.BillID); own || err != nil {
			return err
		}
	}
	b, err := a.Enrollments.SourceReported(ctx, tx, b, paid)
	if errors.Is(err, enrollments.ErrBillNotFound) {
		return nil
	}
	if err != nil || b.ChargeID == nil {
		return err
	}
	err = a.Charges.SourceReported(ctx, tx, *b.ChargeID, paid, a.Clock.Now())
	if errors.Is(err, charges.ErrStale) {
		return nil
	}
	return err
}

// sourcePaid records what a housing bill's source reports paid against it
// (reported), in tx with the enrollment locked. The report comes back
// through the source with rebill's own payments in it, so what was paid
// outside rebill is reported less what rebill's charges of the bill's
// copies (every enrollment's) captured; above what is recorded so far: in
// full, the bill is paid elsewhere and its waiting charge voided; in
// part, its charge's next attempt is for the rest. A bill one of whose
// copies' charges may hold money (a hold or a capture under way) is left
// as it is: what the source reports may be that very payment, and a later
// pull reports it again.
func (a *Autopay) sourcePaid(ctx context.Context, tx pgx.Tx, b enrollments.Bill, reported int64) error {
	switch b.Status {
	case enrollments.BillPaid, enrollments.BillPaidElsewhere, enrollments.BillWithdrawn, enrollments.BillExpired:
		return nil
	}
	copies, err := a.Enrollments.CopyCharges(ctx, tx, b.Identities())
	if err != nil {
		return err
	}
	own, inFlight, err := charges.OwnPayments(ctx, tx, copies)
	if err != nil || inFlight {
		return err
	}
	paid := reported - own
	if paid <= b.PaidOutside {
		return nil
	}
	var c *charges.Charge
	if b.ChargeID != nil {
		got, err := charges.Get(ctx, tx, *b.ChargeID)
		if err != nil {
			return err
		}
		if !slices.Contains([]charges.Status{charges.Scheduled, charges.Declined, charges.Failed, charges.Voided}, got.Status) ||
			got.VoidRequested {
			return nil
		}
		c = &got
	}
	b, inFull, err := a.Enrollments.SourcePaid(ctx, tx, b, paid)
	if err != nil || c == nil {
		return err
	}
	now := a.Clock.Now()
	if inFull {
		return a.Charges.StopBills(ctx, tx, b.EnrollmentID, c.ID, charges.FailurePaidElsewhere, now)
	}
	err = a.Charges.RepriceOutside(ctx, tx, c.ID, paid, now)
	if errors.Is(err, charges.ErrStale) {
		return nil
	}
	return err
}
