package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/fleet"
)

// The jobs of a refund. refund_send sends a pending refund under its key;
// a rerun (River's retry after a 503, a crash between the call and the
// commit) sends the very same request under the same key, which the
// gateway performs once and answers with its first result. A send whose
// answer was lost moves the refund to unknown and hands it to refund_lookup,
// which asks the gateway by the key and settles the refund from what it
// holds; only when the gateway shows it never got the refund does the
// look-up send it again, under the same key. Nothing sends a refund under
// another key: a new key is a new refund, requested by a person.

// SendRefund runs a refund_send job. Its last try hands a refund with no
// verdict to a look-up; a last try that could not even do that (the
// database failing over) waits and runs again, under the same key, rather
// than be discarded with the refund pending and no job.
func (p *Pipeline) SendRefund(ctx context.Context, job *river.Job[RefundSendArgs]) error {
	lastTry := job.MaxAttempts > 0 && job.Attempt >= job.MaxAttempts
	err := p.sendPending(ctx, job.Args.RefundID, lastTry)
	if err != nil && lastTry && ctx.Err() == nil && !isSnooze(err) && !errors.Is(err, pgx.ErrNoRows) {
		p.Logger.Error().Err(err).Str("refund_id", job.Args.RefundID.String()).
			Msg("refund send failed on its last attempt: it waits and runs again rather than be given up")
		return river.JobSnooze(p.holdCheckWait(stageRun{run: job.Attempt + snoozes(job.Metadata)}, err))
	}
	return err
}

func (p *Pipeline) sendPending(ctx context.Context, id uuid.UUID, lastTry bool) error {
	r, err := GetRefund(ctx, p.Pool, id)
	if err != nil {
		return err
	}
	if r.Status != RefundPending {
		return nil // settled, or in a look-up's hands
	}
	return p.sendRefund(ctx, r, false, lastTry)
}

// isSnooze reports whether err is River's snooze: a wait already chosen.
func isSnooze(err error) bool {
	var snooze *river.JobSnoozeError
	return errors.As(err, &snooze)
}

// LookUpRefund runs a refund_lookup job. It is a refund's last job, and
// nothing enqueues another: so a gateway that does not answer (down, a
// timeout, the answer to a resend lost) is waited for, the job snoozed
// with a growing wait that spends none of River's attempts, however long
// it takes. A look-up given up would leave the refund open with no job.
func (p *Pipeline) LookUpRefund(ctx context.Context, job *river.Job[RefundLookupArgs]) error {
	err := p.lookUpRefund(ctx, job)
	if ctx.Err() == nil && (errors.Is(err, gateway.ErrUnavailable) || errors.Is(err, gateway.ErrUnknownOutcome) ||
		errors.Is(err, context.DeadlineExceeded)) {
		p.Logger.Warn().Err(err).Str("refund_id", job.Args.RefundID.String()).Msg("refund look-up waits for its gateway")
		return river.JobSnooze(p.holdCheckWait(stageRun{run: job.Attempt + snoozes(job.Metadata)}, err))
	}
	if err != nil && ctx.Err() == nil && job.Attempt >= job.MaxAttempts && !isSnooze(err) && !errors.Is(err, pgx.ErrNoRows) {
		// Any other failure (the database failing over, a pool cut) spends
		// River's attempts; on the last one the look-up waits instead of
		// being discarded.
		p.Logger.Error().Err(err).Str("refund_id", job.Args.RefundID.String()).
			Msg("refund look-up failed on its last attempt: it waits and runs again rather than be given up")
		return river.JobSnooze(p.holdCheckWait(stageRun{run: job.Attempt + snoozes(job.Metadata)}, err))
	}
	return err
}

func (p *Pipeline) lookUpRefund(ctx context.Context, job *river.Job[RefundLookupArgs]) error {
	r, err := GetRefund(ctx, p.Pool, job.Args.RefundID)
	if err != nil {
		return err
	}
	// pending: this job sent it again and got no verdict, or died before
	// recording one; it is looked up again, never sent blind.
	if r.Status != RefundUnknown && r.Status != RefundPending {
		return nil
	}
	c, g, err := p.refundGateway(ctx, r)
	if err != nil || g == nil {
		return err
	}
	req := p.refundRequest(c, r)
	lookup := gateway.LookupRequest{Op: gateway.OpRefund, Request: req, MayReplay: true}
	if r.SentAt != nil {
		lookup.SentAt = *r.SentAt
	}
	res, err := p.call(ctx, c, gateway.OpRefund, func(ctx context.Context) (gateway.Result, error) {
		return g.Lookup(ctx, lookup)
	})
	switch {
	case err == nil:
		return p.settleRefund(ctx, r, res)
	case errors.Is(err, gateway.ErrNotFound):
		// Never got it: the same refund, under the same key, goes out again.
		if r.Status == RefundUnknown {
			moved, ok, err := p.refundTx(ctx, r, refundMove{from: []RefundStatus{RefundUnknown}, to: RefundPending})
			if err != nil || !ok {
				return err
			}
			r = moved
		}
		return p.sendRefund(ctx, r, true, false)
	case errors.Is(err, gateway.ErrUnprovable):
		// Neither done nor not done may be assumed: it stays unknown,
		// counted by the metrics of refunds stuck unknown, for a person
		// with the gateway's dashboard.
		p.Logger.Warn().Str("refund_id", r.ID.String()).Str("gateway", r.Gateway).
			Msg("refund outcome unprovable: check the gateway's dashboard")
		return nil
	case errors.Is(err, fleet.ErrCircuitOpen):
		return river.JobSnooze(p.Gateways.OpenFor())
	default:
		return fmt.Errorf("refund %s: look up: %w", r.ID, err)
	}
}

// sendRefund sends r, pending, and records the answer. lookingUp: the
// look-up job sends it, and keeps it on a lost answer. lastTry: River
// would give the send job up after this run; a send that gets no verdict
// then goes to a look-up rather than stay pending with no job (an earlier
// run, before a crash, may have reached the gateway).
func (p *Pipeline) sendRefund(ctx context.Context, r Refund, lookingUp, lastTry bool) error {
	c, g, err := p.refundGateway(ctx, r)
	if err != nil || g == nil {
		return err
	}
	// Mark it sent before the call: a look-up then knows since when the
	// gateway may hold the key. It keeps its status: pending means "about
	// to call or called", as a charge's capturing does.
	if r.SentAt == nil {
		if _, err := p.Pool.Exec(ctx, `UPDATE refunds SET sent_at = $2 WHERE id = $1 AND sent_at IS NULL`,
			r.ID, p.Clock.Now()); err != nil {
			return fmt.Errorf("refund %s: mark sent: %w", r.ID, err)
		}
	}
	res, err := p.call(ctx, c, gateway.OpRefund, func(ctx context.Context) (gateway.Result, error) {
		return g.Refund(ctx, p.refundRequest(c, r))
	})
	switch {
	case err == nil:
		return p.settleRefund(ctx, r, res)
	case errors.Is(err, gateway.ErrUnknownOutcome), lastTry && !lookingUp && ctx.Err() == nil &&
		(errors.Is(err, gateway.ErrUnavailable) || errors.Is(err, fleet.ErrCircuitOpen)):
		if lookingUp {
			_, _, err2 := p.refundTx(ctx, r, refundMove{from: []RefundStatus{RefundPending}, to: RefundUnknown})
			if err2 != nil {
				return err2
			}
			return fmt.Errorf("refund %s: sent again, no answer: %w", r.ID, err) // the look-up waits and runs again
		}
		return pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
			_, ok, err := p.Store.moveRefund(ctx, tx, r.ID, refundMove{from: []RefundStatus{RefundPending}, to: RefundUnknown},
				p.Clock.Now())
			if err != nil || !ok {
				return err
			}
			return p.Store.enqueue(ctx, tx, []river.InsertManyParams{{Args: RefundLookupArgs{RefundID: r.ID}}})
		})
	case errors.Is(err, fleet.ErrCircuitOpen):
		return river.JobSnooze(p.Gateways.OpenFor())
	case errors.Is(err, gateway.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		ctx.Err() != nil:
		// River sends it again, same key: the job's end (a timeout, a
		// shutdown) says nothing about what the gateway did.
		return fmt.Errorf("refund %s: %w", r.ID, err)
	default:
		// The port's contract: an error that is neither unavailable nor
		// unknown means nothing was done (an adapter that cannot refund,
		// a request it refused to build). The reservation goes back.
		p.Logger.Error().Err(err).Str("refund_id", r.ID.String()).Str("gateway", r.Gateway).Msg("refund refused by the adapter")
		_, _, err = p.refundTx(ctx, r, refundMove{from: []RefundStatus{RefundPending}, to: RefundFailed, failureCode: "gateway_error"})
		return err
	}
}

// settleRefund records the gateway's verdict on r.
func (p *Pipeline) settleRefund(ctx context.Context, r Refund, res gateway.Result) error {
	from := []RefundStatus{RefundPending, RefundUnknown}
	m := refundMove{from: from, to: RefundSucceeded, gatewayRef: res.Reference}
	if res.Status != gateway.StatusSucceeded {
		code := res.DeclineCode
		if code == "" {
			code = "refused"
		}
		m = refundMove{from: from, to: RefundFailed, gatewayRef: res.Reference, failureCode: code}
	}
	_, _, err := p.refundTx(ctx, r, m)
	return err
}

// refundTx makes one move of r in a transaction of its own.
func (p *Pipeline) refundTx(ctx context.Context, r Refund, m refundMove) (moved Refund, ok bool, err error) {
	err = pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		moved, ok, err = p.Store.moveRefund(ctx, tx, r.ID, m, p.Clock.Now())
		return err
	})
	return moved, ok, err
}

// refundGateway reads r's charge and finds its gateway; a gateway no
// longer configured fails the refund (nothing was sent: nil gateway, nil
// error).
func (p *Pipeline) refundGateway(ctx context.Context, r Refund) (Charge, gateway.Gateway, error) {
	c, err := Get(ctx, p.Pool, r.ChargeID)
	if err != nil {
		return Charge{}, nil, err
	}
	g, err := p.Gateways.Gateway(r.Gateway)
	if err != nil {
		if r.Status == RefundPending && r.SentAt == nil {
			_, _, err = p.refundTx(ctx, r, refundMove{from: []RefundStatus{RefundPending}, to: RefundFailed,
				failureCode: "gateway_not_configured"})
			return Charge{}, nil, err
		}
		return Charge{}, nil, fmt.Errorf("refund %s: %w", r.ID, err)
	}
	return c, g, nil
}

// refundRequest is the gateway request of r: the captured payment named
// by its hold's reference, as the capture named it, and the refund's own
// key and amount.
func (p *Pipeline) refundRequest(c Charge, r Refund) gateway.Request {
	req := gateway.Request{IdempotencyKey: r.GatewayKey, Amount: r.Amount, Currency: r.Currency, ChargeKey: c.Key(),
		AuthorizationID: c.AuthorizationRef, RefundReason: string(r.Reason)}
	paid, err := c.FiscalReceipt()
	switch {
	case err != nil:
		p.Logger.Error().Err(err).Str("charge_id", c.ID.String()).Msg("unreadable fiscal receipt: refund sent without it")
	case paid != nil:
		req.Receipt = RefundReceipt(*paid, r.Amount, c.Amount)
	}
	return req
}

// RefundReceipt is the receipt of a refund of amount out of a payment of
// captured whose receipt was paid: the same lines for a refund in full;
// for a part, one line of the payment's first item for the amount
// returned, as a tax service reads a partial return of a single service.
func RefundReceipt(paid gateway.Receipt, amount, captured int64) *gateway.Receipt {
	out := paid
	out.Items = append([]gateway.ReceiptItem(nil), paid.Items...)
	if amount == captured || len(out.Items) == 0 {
		return &out
	}
	item := out.Items[0]
	item.Quantity, item.Amount = "1", amount
	out.Items = []gateway.ReceiptItem{item}
	return &out
}

// RefundSendWorker runs RefundSendArgs jobs.
type RefundSendWorker struct {
	river.WorkerDefaults[RefundSendArgs]
	Pipeline *Pipeline
}

// Work sends the refund.
func (w *RefundSendWorker) Work(ctx context.Context, job *river.Job[RefundSendArgs]) error {
	return w.Pipeline.SendRefund(ctx, job)
}

// Timeout bounds one run.
func (w *RefundSendWorker) Timeout(*river.Job[RefundSendArgs]) time.Duration {
	return w.Pipeline.jobTimeout()
}

// RefundLookupWorker runs RefundLookupArgs jobs.
type RefundLookupWorker struct {
	river.WorkerDefaults[RefundLookupArgs]
	Pipeline *Pipeline
}

// Work looks the refund up and settles it.
func (w *RefundLookupWorker) Work(ctx context.Context, job *river.Job[RefundLookupArgs]) error {
	return w.Pipeline.LookUpRefund(ctx, job)
}

// Timeout bounds one run.
func (w *RefundLookupWorker) Timeout(*river.Job[RefundLookupArgs]) time.Duration {
	return w.Pipeline.jobTimeout()
}
