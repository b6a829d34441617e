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

// batchRows are a batch's moves as the rows of one store statement, in
// the order of their ids: every batch locks its rows in the same order,
// so two batches that share a charge wait for each other, never deadlock.
// A move's note is its hold's reference.
func batchRows(batch []*guardedMove) rows {
	sorted := slices.SortedFunc(slices.Values(batch), func(a, b *guardedMove) int { return bytes.Compare(a.id[:], b.id[:]) })
	r := rows{ids: make([]uuid.UUID, len(batch)), attempts: make([]int32, len(batch)), notes: make([]string, len(batch))}
	for i, m := range sorted {
		r.ids[i], r.attempts[i], r.notes[i] = m.id, int32(m.attempt), m.reference
	}
	return r
}

// movedByID are the charges a batch's move moved, by id.
func movedByID(cs []Charge, err error) (map[uuid.UUID]Charge, error) {
	if err != nil {
		return nil, fmt.Errorf("batched move: %w", err)
	}
	moved := make(map[uuid.UUID]Charge, len(cs))
	for _, c := range cs {
		moved[c.ID] = c
	}
	return moved, nil
}

// pipelineBatches are the moves of the pipeline's hot path that runs
// share statements for: the hold's "about to call", the hold recorded with
// its capture's "about to call", and the capture's success.
type pipelineBatches struct {
	authorizing, holdThenCapture, captured moveBatcher
}

func newPipelineBatches(p *Pipeline) *pipelineBatches {
	return &pipelineBatches{
		authorizing: moveBatcher{send: func(ctx context.Context, batch []*guardedMove) (map[uuid.UUID]Charge, error) {
			now := p.Clock.Now()
			return movedByID(p.Store.move(ctx, p.Pool, p.beginning(authorizeFrom, Authorizing), now, batchRows(batch), now, string(Scheduled)))
		}},
		holdThenCapture: moveBatcher{send: func(ctx context.Context, batch []*guardedMove) (map[uuid.UUID]Charge, error) {
			now := p.Clock.Now()
			return movedByID(p.Store.move(ctx, p.Pool, heldAndCapturing, now, batchRows(batch), now))
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
	locker, ok := p.Owners.Subscriptions.(ManyLocker)
	if !ok {
		return nil, errors.New("the subscriptions cannot be locked together")
	}
	owners := make([]uuid.UUID, 0, len(batch))
	for _, m := range batch {
		owners = append(owners, m.owner)
	}
	slices.SortFunc(owners, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	owners = slices.Compact(owners)
	moved := map[uuid.UUID]Charge{}
	err := pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		locked, err := locker.LockMany(ctx, tx, owners)
		if err != nil {
			return err
		}
		now := p.Clock.Now()
		cs, err := p.Store.move(ctx, tx, captured([]Status{Capturing}), now, batchRows(batch))
		if err != nil {
			return err
		}
		for _, c := range cs {
			p.transitioned(c, "")
			if owner, ok := locked[c.OwnerID()]; !ok || !owner.PaidChangesNothing {
				if err := p.Store.Paid(ctx, tx, p.Owners.Subscriptions, c, now); err != nil {
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
