package charges

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/platform/riverjob"
)

// AuthorizeArgs places the hold of one attempt of a charge.
type AuthorizeArgs struct {
	ChargeID uuid.UUID `json:"charge_id" river:"unique"`
	Attempt  int       `json:"attempt" river:"unique"`
}

// Kind names the job in River.
func (AuthorizeArgs) Kind() string { return "charge_authorize" }

// InsertOpts makes the job unique per charge attempt.
func (AuthorizeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// CaptureArgs collects the hold of one attempt of a charge.
type CaptureArgs struct {
	ChargeID uuid.UUID `json:"charge_id" river:"unique"`
	Attempt  int       `json:"attempt" river:"unique"`
}

// Kind names the job in River.
func (CaptureArgs) Kind() string { return "charge_capture" }

// InsertOpts makes the job unique per charge attempt.
func (CaptureArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// VoidArgs releases the hold of a charge whose subscription was cancelled.
type VoidArgs struct {
	ChargeID uuid.UUID `json:"charge_id" river:"unique"`
	Attempt  int       `json:"attempt" river:"unique"`
	// Unpostable carries the poster's decision that the hold will never
	// be posted to the registry (Store.HoldUnpostable), made with the
	// transaction that enqueued the job: the void job releases the hold
	// on it rather than deciding again, since its own reading of the
	// clock or of the posting can disagree, and a hold neither posted nor
	// voided has nothing left to move it.
	Unpostable bool `json:"unpostable,omitempty"`
}

// Kind names the job in River.
func (VoidArgs) Kind() string { return "charge_void" }

// InsertOpts makes the job unique per charge attempt.
func (VoidArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// LookupArgs asks the gateway what became of a call whose answer was
// lost, and continues from there.
type LookupArgs struct {
	ChargeID uuid.UUID `json:"charge_id" river:"unique"`
	Attempt  int       `json:"attempt" river:"unique"`
	// Op keeps the JSON name "phase" of jobs enqueued before the rename.
	Op gateway.Op `json:"phase" river:"unique"`
}

// Kind names the job in River.
func (LookupArgs) Kind() string { return "charge_reconcile" }

// InsertOpts makes the job unique per charge attempt and operation.
func (LookupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// ReleaseHoldArgs looks up, at its gateway, a charge that went to review
// while it may have held an authorization, and voids the hold unless a
// capture exists: review must not leave a customer's money held.
type ReleaseHoldArgs struct {
	ChargeID uuid.UUID `json:"charge_id" river:"unique"`
	Attempt  int       `json:"attempt" river:"unique"`
}

// Kind names the job in River.
func (ReleaseHoldArgs) Kind() string { return "charge_release_hold" }

// InsertOpts makes the job unique per charge attempt.
func (ReleaseHoldArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// RefundSendArgs sends a pending refund to its charge's gateway under the
// refund's key.
type RefundSendArgs struct {
	RefundID uuid.UUID `json:"refund_id" river:"unique"`
}

// Kind names the job in River.
func (RefundSendArgs) Kind() string { return "refund_send" }

// InsertOpts makes the job unique per refund: a refund is sent by one job,
// whose retries repeat the call under the same key.
func (RefundSendArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// RefundLookupArgs asks the gateway, by the refund's key, what became of
// a refund whose answer was lost, and settles it from the answer; when the
// gateway never got it, the same job sends it again under the same key.
type RefundLookupArgs struct {
	RefundID uuid.UUID `json:"refund_id" river:"unique"`
}

// Kind names the job in River.
func (RefundLookupArgs) Kind() string { return "refund_lookup" }

// InsertOpts makes the job unique per refund.
func (RefundLookupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: riverjob.UniqueForever()}
}

// AuthorizeSnoozes counts the waits of every authorize job so far (River's
// snoozes): how often a charge waited for a declines slot or for its
// gateway. The benchmark reports it beside its throughput.
func AuthorizeSnoozes(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT coalesce(sum(coalesce((metadata ->> 'snoozes')::int, 0)), 0) FROM river_job
		WHERE kind = $1`, AuthorizeArgs{}.Kind()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count authorize snoozes: %w", err)
	}
	return n, nil
}
