package charges

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Start is start for the tests of this package's verbs: what a move that
// begins an attempt enqueues, asked for twice.
func (s *Store) Start(ctx context.Context, tx pgx.Tx, cs []Charge) error { return s.start(ctx, tx, cs) }

// SettleRefund moves a refund as its jobs do, for the tests of the
// reservation: to succeeded or failed (from pending or unknown), or to
// unknown (from pending).
func (s *Store) SettleRefund(ctx context.Context, tx pgx.Tx, id uuid.UUID, to RefundStatus, now time.Time) (Refund, bool, error) {
	return s.moveRefund(ctx, tx, id, refundMove{from: RefundMachine.From(to), to: to}, now)
}

// SnoozeJob is snoozeJob, for the test of the snooze a waiting step makes
// in its transaction.
var SnoozeJob = snoozeJob

// AnyInFlightSQL is the statement AnyInFlight sends, for the test of its
// plan.
const AnyInFlightSQL = anyInFlightSQL
