package charges

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// batchTimeout bounds one batched statement. It does not follow the
// context of the run that happens to send it: that run's end must not fail
// the other runs whose moves ride in the same statement.
const batchTimeout = 30 * time.Second

// batchLimit bounds the moves of one statement.
const batchLimit = 500

// guardedMove is one charge's move in a batch: what the charge's own
// guarded UPDATE would say, the attempt it is for (0: any) and, for a hold,
// the gateway's reference.
type guardedMove struct {
	id        uuid.UUID
	attempt   int
	reference string
	owner     uuid.UUID // the subscription a captured charge bills

	done   chan struct{} // closed when the batch that carried it ran
	lead   chan struct{} // closed when this move's run is to send the next batch
	charge Charge        // the charge as moved; zero ID: the guard held it back
	err    error
}

// moveBatcher sends the same guarded move of many charges in one
// statement, so that the runs moving charges concurrently share one round
// trip and one commit (group commit, as River completes its jobs). No
// goroutine of its own and no timer: the run that finds no batch in flight
// sends one with every move waiting, and hands the next to a move that
// arrived meanwhile, so a lone move goes at once and moves under load are
// sent together. Each move keeps its own guard, so a batch gives each
// charge the answer its own statement would have: moved, or ErrStale.
type moveBatcher struct {
	send func(ctx context.Context, moves []*guardedMove) (map[uuid.UUID]Charge, error)

	mu      sync.Mutex
	busy    bool
	waiting []*guardedMove
}

// do moves m's charge in the next batch and returns it as moved. Returns
// ErrStale when its guard held it back.
func (b *moveBatcher) do(ctx context.Context, m *guardedMove) (Charge, error) {
	m.done, m.lead = make(chan struct{}), make(chan struct{})
	b.mu.Lock()
	b.waiting = append(b.waiting, m)
	if b.busy {
		b.mu.Unlock()
		select {
		case <-m.done:
			return m.charge, m.err
		case <-m.lead:
		}
		b.mu.Lock()
	}
	b.busy = true
	n := min(len(b.waiting), batchLimit)
	batch := b.waiting[:n:n]
	b.waiting = b.waiting[n:]
	b.mu.Unlock()

	b.run(ctx, batch)

	b.mu.Lock()
	if len(b.waiting) > 0 {
		close(b.waiting[0].lead) // stays busy: that run sends the next batch
	} else {
		b.busy = false
	}
	b.mu.Unlock()
	<-m.done // sent in this batch, or in an earlier one
	return m.charge, m.err
}

func (b *moveBatcher) run(ctx context.Context, batch []*guardedMove) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	moved, err := b.sendSafely(ctx, batch)
	for _, m := range batch {
		switch c, ok := moved[m.id]; {
		case err != nil:
			m.err = err
		case !ok || (m.attempt != 0 && c.AttemptCount != m.attempt):
			m.err = ErrStale
		default:
			m.charge = c
		}
		close(m.done)
	}
}

// sendSafely sends batch, turning a panic into the error of every move in
// it: the runs waiting on the batch, and the ones queued behind it, must
// hear back whatever happens to the run that sends it.
func (b *moveBatcher) sendSafely(ctx context.Context, batch []*guardedMove) (moved map[uuid.UUID]Charge, err error) {
	defer func() {
		if r := recover(); r != nil {
			moved, err = nil, fmt.Errorf("batched move panicked: %v", r)
		}
	}()
	return b.send(ctx, batch)
}

// batchArgs are a batch's moves as the arrays its statement unnests, in
// the order of their ids: every batch locks its rows in the same order,
// so two batches that share a charge wait for each other, never deadlock.
func batchArgs(batch []*guardedMove) (ids []uuid.UUID, attempts []int32, references []string) {
	sorted := slices.SortedFunc(slices.Values(batch), func(a, b *guardedMove) int { return bytes.Compare(a.id[:], b.id[:]) })
	ids, attempts, references = make([]uuid.UUID, len(batch)), make([]int32, len(batch)), make([]string, len(batch))
	for i, m := range sorted {
		ids[i], attempts[i], references[i] = m.id, int32(m.attempt), m.reference
	}
	return ids, attempts, references
}

// pipelineBatches are the moves of the pipeline's hot path that runs
// share statements for: the hold's "about to call", the hold recorded with
// its capture's "about to call", and the capture's success.
type pipelineBatches struct {
	authorizing, holdThenCapture, captured moveBatcher
}

func newPipelineBatches(p *Pipeline) *pipelineBatches {
	db, clk := p.Pool, p.Clock
	// Both are moves of the table, checked as every move is; and like every
	// move they publish their events, though these statuses have none.
	authorizing := allowed(authorizeFrom, Authorizing)
	var holdThenCapture error
	if _, ok := PassesThrough(Authorizing, Capturing); !ok {
		holdThenCapture = Machine.Refuse(Authorizing, Capturing, "")
	}
	return &pipelineBatches{
		authorizing: moveBatcher{send: func(ctx context.Context, batch []*guardedMove) (map[uuid.UUID]Charge, error) {
			if authorizing != nil {
				return nil, authorizing
			}
			ids, attempts, _ := batchArgs(batch)
			now := clk.Now()
			return sendMoves(ctx, db, now, nil, `UPDATE charges SET status = $3, updated_at = $1, next_attempt_at = NULL,
					`+repriceSQL+`
				FROM unnest($4::uuid[], $5::int[]) AS b(bid, battempt)
				WHERE id = b.bid AND status = ANY($6) AND (b.battempt = 0 OR attempt_count = b.battempt) AND NOT void_requested
					AND `+startableSQL+` AND `+p.registryGuard()+`
				RETURNING `+columns,
				now, string(Scheduled), string(Authorizing), ids, attempts, texts(authorizeFrom))
		}},
		holdThenCapture: moveBatcher{send: func(ctx context.Context, batch []*guardedMove) (map[uuid.UUID]Charge, error) {
			if holdThenCapture != nil {
				return nil, holdThenCapture
			}
			ids, attempts, references := batchArgs(batch)
			now := clk.Now()
			return sendMoves(ctx, db, now, []Status{Authorized}, `UPDATE charges SET status = $1, updated_at = $2, next_attempt_at = NULL,
					authorization_ref = b.bref, authorized_at = $2, unknown_phase = NULL, failure_code = NULL
				FROM unnest($3::uuid[], $4::int[], $5::text[]) AS b(bid, battempt, bref)
				WHERE id = b.bid AND status = $6 AND (b.battempt = 0 OR attempt_count = b.battempt) AND NOT void_requested
					AND registry_uin IS NULL
				RETURNING `+columns,
				string(Capturing), now, ids, attempts, references, string(Authorizing))
		}},
		captured: moveBatcher{send: p.recordCaptures},
	}
}

// recordCaptures records the captures of a batch of subscriptions'
// charges in one transaction, as afterCapture records one: their
// subscriptions locked first (all of them, in the order of their ids),
// then each charge moved to succeeded under its guard, with its event,
// and its subscription told when the payment can change it.
func (p *Pipeline) recordCaptures(ctx context.Context, batch []*guardedMove) (map[uuid.UUID]Charge, error) {
	locker, ok := p.Subscriptions.(ManyLocker)
	if !ok {
		return nil, errors.New("the subscriptions cannot be locked together")
	}
	if err := allowed([]Status{Capturing}, Succeeded); err != nil {
		return nil, err
	}
	owners := make([]uuid.UUID, 0, len(batch))
	for _, m := range batch {
		owners = append(owners, m.owner)
	}
	slices.SortFunc(owners, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	owners = slices.Compact(owners)
	ids, attempts, _ := batchArgs(batch)
	moved := map[uuid.UUID]Charge{}
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		locked, err := locker.LockMany(ctx, tx, owners)
		if err != nil {
			return err
		}
		now := p.Clock.Now()
		cs, err := collect(tx.Query(ctx, `UPDATE charges SET status = $1, updated_at = $2, next_attempt_at = NULL,
				unknown_phase = NULL, failure_code = NULL
			FROM unnest($3::uuid[], $4::int[]) AS b(bid, battempt)
			WHERE id = b.bid AND status = $5 AND (b.battempt = 0 OR attempt_count = b.battempt)
			RETURNING `+columns,
			string(Succeeded), now, ids, attempts, string(Capturing)))
		if err != nil {
			return err
		}
		for _, c := range cs {
			p.transitioned(c, "")
			if err := publish(ctx, tx, "", c, now); err != nil {
				return err
			}
			if owner, ok := locked[c.OwnerID()]; !ok || !owner.PaidChangesNothing {
				if err := p.Subscriptions.ChargePaid(ctx, tx, c); err != nil {
					return err
				}
			}
			moved[c.ID] = c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record captures: %w", err)
	}
	return moved, nil
}

// sendMoves runs a batched guarded UPDATE at now and returns the charges
// it moved, by id, having published each move, through the statuses of
// passed first.
func sendMoves(ctx context.Context, db DBTX, now time.Time, passed []Status, query string, args ...any) (map[uuid.UUID]Charge, error) {
	cs, err := collect(db.Query(ctx, query, args...))
	if err != nil {
		return nil, fmt.Errorf("batched move: %w", err)
	}
	moved := make(map[uuid.UUID]Charge, len(cs))
	for _, c := range cs {
		for _, via := range passed {
			step := c
			step.Status = via
			if err := publish(ctx, db, "", step, now); err != nil {
				return nil, err
			}
		}
		if err := publish(ctx, db, "", c, now); err != nil {
			return nil, err
		}
		moved[c.ID] = c
	}
	return moved, nil
}
