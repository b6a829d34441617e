package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges"
)

// EnqueueAuthorize enqueues, in tx, the authorize job of each charge's
// current attempt (unique per attempt: enqueueing twice is harmless).
func (b *Biller) EnqueueAuthorize(ctx context.Context, tx pgx.Tx, cs []charges.Charge) error {
	jobs := make([]river.InsertManyParams, len(cs))
	for i, c := range cs {
		jobs[i] = river.InsertManyParams{Args: charges.AuthorizeArgs{ChargeID: c.ID, Attempt: c.AttemptCount}}
	}
	return b.insertMany(ctx, tx, jobs)
}

func (b *Biller) insertMany(ctx context.Context, tx pgx.Tx, jobs []river.InsertManyParams) error {
	if len(jobs) == 0 {
		return nil
	}
	if b.Client == nil {
		return errors.New("scheduler: River client not set")
	}
	if _, err := b.Client.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueue %d jobs: %w", len(jobs), err)
	}
	return nil
}
