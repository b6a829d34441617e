// Package groupcommit sends the requests that concurrent runs make of the
// same statement together, so that they share one round trip and one
// commit, as River completes its jobs and as the charge pipeline sends its
// hot-path moves (charges/batch.go).
//
// No goroutine of its own and no timer: the run that finds no batch in
// flight sends one with every request waiting, and hands the next batch to
// a request that arrived meanwhile. A lone request goes at once, and
// requests under load are sent together.
package groupcommit

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Batcher sends requests of type R in shared batches. R is usually a
// pointer to a struct whose result fields Send fills in.
type Batcher[R any] struct {
	// Send runs one batch; its error is every request's.
	Send func(ctx context.Context, batch []R) error
	// Limit bounds the requests of one batch (0: unbounded).
	Limit int
	// Timeout bounds one batch. A batch does not follow the context of the
	// run that happens to send it: that run's end must not fail the other
	// runs whose requests ride in it.
	Timeout time.Duration

	mu      sync.Mutex
	busy    bool
	waiting []*call[R]
}

type call[R any] struct {
	req  R
	done chan struct{} // closed when the batch that carried it ran
	lead chan struct{} // closed when this call's run is to send the next batch
	err  error
}

// Do sends req in the next batch and returns when that batch has run.
func (b *Batcher[R]) Do(ctx context.Context, req R) error {
	c := &call[R]{req: req, done: make(chan struct{}), lead: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	if b.busy {
		b.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-c.lead:
		}
		b.mu.Lock()
	}
	b.busy = true
	n := len(b.waiting)
	if b.Limit > 0 {
		n = min(n, b.Limit)
	}
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
	<-c.done // sent in this batch, or in an earlier one
	return c.err
}

func (b *Batcher[R]) run(ctx context.Context, batch []*call[R]) {
	ctx = context.WithoutCancel(ctx)
	if b.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.Timeout)
		defer cancel()
	}
	reqs := make([]R, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	err := b.sendSafely(ctx, reqs)
	for _, c := range batch {
		c.err = err
		close(c.done)
	}
}

// sendSafely turns a panic of Send into the error of every request of the
// batch: the runs waiting on it, and the ones queued behind it, must hear
// back whatever happens to the run that sends it.
func (b *Batcher[R]) sendSafely(ctx context.Context, reqs []R) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch panicked: %v", r)
		}
	}()
	return b.Send(ctx, reqs)
}
