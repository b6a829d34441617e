package charges

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A charge has one owner, which it bills and whose payment method it
// uses: a subscription (a period's charge) or an autopay enrollment (a
// bill's). The pipeline reports every outcome to the owner, through the
// port of its kind, inside the transaction that records the outcome.

// OwnerState is what a charge's outcome needs of its owner, as locked.
type OwnerState struct {
	// Gateway and Token are the owner's current payment method.
	Gateway string
	Token   string
	// UnpaidSince is set while the owner is unpaid: its dunning ended
	// then. Charges of periods that began since are not owed; older ones
	// wait for a new card.
	UnpaidSince *time.Time
	// Cancelled: nothing more may be taken.
	Cancelled bool
	// NextAttempt, when set, replaces the pipeline's dunning schedule for
	// this owner's charge: when the attempt of c just declined, whose
	// first decline was at first, is followed by another (ok false: none).
	// Bills use it to fit dunning before their deadlines.
	NextAttempt func(c Charge, first time.Time) (at time.Time, ok bool)
	// PaidChangesNothing: a paid charge leaves this owner as it is locked
	// (an active subscription), so ChargePaid is not called and its reads
	// are spared on the path every successful charge takes.
	PaidChangesNothing bool
}

// Owner is the port of one kind of owner (subscriptions, or enrollments):
// what the pipeline tells the owner of a charge, by the owner's id.
type Owner interface {
	// Lock locks the owner's row until tx ends and returns it. Outcomes
	// lock the owner before the charge, the order every owner's event
	// uses too, so the two serialise without deadlock and an outcome sees
	// any event that committed before it.
	Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (OwnerState, error)
	// ChargePaid: c succeeded, or was voided as not owed: a past-due or
	// unpaid owner may recover, unless it owesMore (another of its charges
	// is owed and not collected). notOwedSince, when set, is when the
	// dunning of an owner that left unpaid had ended: its charges of
	// periods that began since are not owed.
	ChargePaid(ctx context.Context, tx pgx.Tx, c Charge, owesMore bool) (notOwedSince *time.Time, err error)
	// ChargeDeclined: a soft decline; dunning will retry (past due).
	ChargeDeclined(ctx context.Context, tx pgx.Tx, ownerID uuid.UUID) error
	// ChargeFailed: a hard decline or dunning exhausted. dunningEnded,
	// when set, is when the dunning of an owner that became unpaid ended
	// (the owner's rule says when): its charges of periods that began
	// since are not owed, and its other declined charges stop retrying.
	ChargeFailed(ctx context.Context, tx pgx.Tx, c Charge) (dunningEnded *time.Time, err error)
}

// Paid reports to owner, in tx, that c was paid (or voided as not owed),
// with whether the owner owes more, and stops the charges its answer says
// are not owed. The caller locked the owner first.
func (s *Store) Paid(ctx context.Context, tx pgx.Tx, owner Owner, c Charge, now time.Time) error {
	owesMore := false
	if c.EnrollmentID == uuid.Nil {
		var err error
		if owesMore, err = hasUnpaid(ctx, tx, c.SubscriptionID, c.ID); err != nil {
			return err
		}
	}
	since, err := owner.ChargePaid(ctx, tx, c, owesMore)
	if err != nil || since == nil {
		return err
	}
	return s.NotOwedSince(ctx, tx, c.SubscriptionID, *since, now)
}

// Failed reports to owner, in tx, that c failed, and applies the end of
// the owner's dunning to its other charges when its answer says it ended.
// The caller locked the owner first.
func (s *Store) Failed(ctx context.Context, tx pgx.Tx, owner Owner, c Charge, now time.Time) error {
	end, err := owner.ChargeFailed(ctx, tx, c)
	if err != nil || end == nil {
		return err
	}
	return s.dunningEnded(ctx, tx, c.SubscriptionID, *end, now)
}

// ManyLocker is an Owner that can lock many owners in one statement, in
// the order of their ids: the pipeline then records the captures of many
// charges in one transaction.
type ManyLocker interface {
	LockMany(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (map[uuid.UUID]OwnerState, error)
}

// Owners are the ports of the two kinds of owner; Of routes a charge to
// its own. Enrollments is nil where no enrollment exists.
type Owners struct {
	Subscriptions Owner
	Enrollments   Owner
}

// Of is the port of c's owner: its enrollment's for a bill's charge, its
// subscription's otherwise.
func (o Owners) Of(c Charge) Owner {
	if c.EnrollmentID != uuid.Nil && o.Enrollments != nil {
		return o.Enrollments
	}
	return o.Subscriptions
}
