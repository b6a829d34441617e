// Package sim is dev mode's simulated state payment registry: gateways
// gmp1 and gmp2 (registry.Gateway) over one book of payments in the
// database, with fault switches, like the simulated payment gateways.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/platform/clock"
)

// Names are dev mode's simulated registry gateways.
var Names = []string{"gmp1", "gmp2"}

// Sim is dev mode's simulated registry: one book of payments (the
// dev_registry_ledger table, shared by every node) reached through named
// gateways with fault switches, like the simulated payment gateways.
type Sim struct {
	Pool *pgxpool.Pool
	// Clock stamps acceptances and annulments: the service clock (the dev
	// clock), as the simulated payment gateways stamp their operations, so
	// the book reads on the days rebill's records do. Nil: real time.
	Clock clock.Clock
	// Names are its gateways' names; nil: Names.
	Names []string
	// Accruals tells the simulated registry what an accrual costs, as the
	// real registry knows it from the authority that issued it: in dev
	// mode, from the fine's bill in rebill's records, read by the bills'
	// owner (wired to enrollments.FirstCopy). Nil: it knows no accrual,
	// and none is ever settled.
	Accruals func(ctx context.Context, uin string) (Accrual, bool, error)
}

// Accrual is what the registry knows of a fine: its full price, and its
// discounted price until the discount ends (both nil without one).
type Accrual struct {
	Amount       int64
	Discounted   *int64
	DiscountEnds *time.Time
}

func (s Sim) names() []string {
	if s.Names == nil {
		return Names
	}
	return s.Names
}

// Gateways returns the simulated gateways.
func (s Sim) Gateways() []registry.Gateway {
	var clk clock.Clock = clock.Wall{}
	if s.Clock != nil {
		clk = s.Clock
	}
	names := s.names()
	out := make([]registry.Gateway, len(names))
	for i, name := range names {
		out[i] = simGateway{name: name, pool: s.Pool, clock: clk, accruals: s.Accruals}
	}
	return out
}

// Known reports whether name is a simulated registry gateway.
func (s Sim) Known(name string) bool { return slices.Contains(s.names(), name) }

// LedgerEntry is one payment in the simulated registry's book.
type LedgerEntry struct {
	Gateway   string    `json:"gateway"`
	PaymentID string    `json:"payment_id"`
	UIN       string    `json:"uin"`
	Amount    int64     `json:"amount"`
	Status    string    `json:"status"`
	At        time.Time `json:"at"`
}

// Ledger lists the book, oldest first.
func (s Sim) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	rows, err := s.Pool.Query(ctx, `SELECT gateway, payment_id, uin, amount, status, at FROM dev_registry_ledger ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("registry ledger: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LedgerEntry, error) {
		var e LedgerEntry
		err := row.Scan(&e.Gateway, &e.PaymentID, &e.UIN, &e.Amount, &e.Status, &e.At)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("registry ledger: %w", err)
	}
	return out, nil
}

// Faults are a simulated registry gateway's switches.
type Faults struct {
	Down         bool    `json:"down"`
	LatencyMS    int     `json:"latency_ms"`
	ErrorRate    float64 `json:"error_rate"`
	LoseResponse bool    `json:"lose_response"`
	// Processing is how many looks (the post itself, its replays and
	// look-ups, through any gateway) a payment posted through this gateway
	// meanwhile answers "still processing" to before it is accepted. A
	// payment still processing cannot be annulled yet: an annulment of it
	// is answered "still processing" too and does nothing.
	Processing int `json:"processing"`
	// AnnulUnanswered annuls, as soon as it is accepted, a payment whose
	// acceptance goes unanswered (its post's answer lost, or its
	// processing ending on a look-up): the look-up or the replay that
	// follows finds it annulled.
	AnnulUnanswered bool `json:"annul_unanswered"`
}

// FaultsPatch changes the given switches.
type FaultsPatch struct {
	Down            *bool    `json:"down"`
	LatencyMS       *int     `json:"latency_ms"`
	ErrorRate       *float64 `json:"error_rate"`
	LoseResponse    *bool    `json:"lose_response"`
	Processing      *int     `json:"processing"`
	AnnulUnanswered *bool    `json:"annul_unanswered"`
}

// SetFaults applies patch to gateway's switches and returns them.
func (s Sim) SetFaults(ctx context.Context, gateway string, patch FaultsPatch) (Faults, error) {
	var f Faults
	err := s.Pool.QueryRow(ctx, `INSERT INTO dev_registry_faults AS f (gateway, down, latency_ms, error_rate, lose_response,
			processing, annul_unanswered)
		VALUES ($1, coalesce($2, false), coalesce($3, 0), coalesce($4, 0), coalesce($5, false), coalesce($6, 0), coalesce($7, false))
		ON CONFLICT (gateway) DO UPDATE SET down = coalesce($2, f.down), latency_ms = coalesce($3, f.latency_ms),
			error_rate = coalesce($4, f.error_rate), lose_response = coalesce($5, f.lose_response),
			processing = coalesce($6, f.processing), annul_unanswered = coalesce($7, f.annul_unanswered)
		RETURNING down, latency_ms, error_rate, lose_response, processing, annul_unanswered`,
		gateway, patch.Down, patch.LatencyMS, patch.ErrorRate, patch.LoseResponse, patch.Processing, patch.AnnulUnanswered).
		Scan(&f.Down, &f.LatencyMS, &f.ErrorRate, &f.LoseResponse, &f.Processing, &f.AnnulUnanswered)
	if err != nil {
		return Faults{}, fmt.Errorf("set registry faults: %w", err)
	}
	return f, nil
}

type simGateway struct {
	name     string
	pool     *pgxpool.Pool
	clock    clock.Clock
	accruals func(ctx context.Context, uin string) (Accrual, bool, error)
}

func (g simGateway) Name() string { return g.name }

// enter applies the faults before a call: down or an injected error does
// nothing; latency waits (a caller that hangs up meanwhile gets nothing
// done). It returns the switches, LoseResponse saying whether the answer
// is to be lost.
func (g simGateway) enter(ctx context.Context) (Faults, error) {
	f, err := g.faults(ctx)
	if err != nil {
		return Faults{}, err
	}
	if f.Down || (f.ErrorRate > 0 && rand.Float64() < f.ErrorRate) {
		return Faults{}, fmt.Errorf("%w: %s is down", registry.ErrUnavailable, g.name)
	}
	if f.LatencyMS > 0 {
		select {
		case <-time.After(time.Duration(f.LatencyMS) * time.Millisecond):
		case <-ctx.Done():
			return Faults{}, fmt.Errorf("%w: %s: %w", registry.ErrUnknownOutcome, g.name, ctx.Err())
		}
	}
	return f, nil
}

func (g simGateway) faults(ctx context.Context) (Faults, error) {
	var f Faults
	err := g.pool.QueryRow(ctx, `SELECT down, latency_ms, error_rate, lose_response, processing, annul_unanswered
		FROM dev_registry_faults WHERE gateway = $1`, g.name).
		Scan(&f.Down, &f.LatencyMS, &f.ErrorRate, &f.LoseResponse, &f.Processing, &f.AnnulUnanswered)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Faults{}, fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	}
	return f, nil
}

// simRetryAfter is what the simulated registry asks of a caller whose
// payment is still processing.
const simRetryAfter = time.Second

// Post records a payment, or answers a replay with what the book holds:
// still processing, accepted, or annulled (registry.ErrAnnulled).
func (g simGateway) Post(ctx context.Context, p registry.Payment) error {
	f, err := g.enter(ctx)
	if err != nil {
		return err
	}
	status := "accepted"
	if f.Processing > 0 {
		status = "processing"
	} else if f.LoseResponse && f.AnnulUnanswered {
		status = "annulled"
	}
	at := g.clock.Now().UTC()
	if _, err := g.pool.Exec(context.WithoutCancel(ctx), `INSERT INTO dev_registry_ledger AS l (payment_id, gateway, uin, amount,
			status, at, looks_left, annulled_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $5 = 'annulled' THEN $6::timestamptz END) ON CONFLICT (payment_id) DO NOTHING`,
		p.PaymentID, g.name, p.UIN, p.Amount, status, at, f.Processing); err != nil {
		return fmt.Errorf("%w: %s: %w", registry.ErrUnknownOutcome, g.name, err)
	}
	status, err = g.look(context.WithoutCancel(ctx), p.PaymentID, f.AnnulUnanswered)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", registry.ErrUnknownOutcome, g.name, err)
	}
	if f.LoseResponse {
		return fmt.Errorf("%w: %s lost the answer", registry.ErrUnknownOutcome, g.name)
	}
	return g.answer(status)
}

// look counts one look at a payment and returns its status: a payment
// still processing is accepted once its looks are used up, and annulled
// at once instead when annul (the answering gateway annuls payments whose
// acceptance it did not answer: it had answered "still processing").
// "" when the book does not hold it.
func (g simGateway) look(ctx context.Context, paymentID string, annul bool) (string, error) {
	var status string
	err := g.pool.QueryRow(ctx, `UPDATE dev_registry_ledger SET looks_left = greatest(looks_left - 1, 0),
			status = CASE WHEN status <> 'processing' OR looks_left > 0 THEN status WHEN $2 THEN 'annulled' ELSE 'accepted' END,
			annulled_at = CASE WHEN status = 'processing' AND looks_left = 0 AND $2 THEN $3 ELSE annulled_at END
		WHERE payment_id = $1 RETURNING status`, paymentID, annul, g.clock.Now().UTC()).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look at payment %s: %w", paymentID, err)
	}
	return status, nil
}

// answer is a post's answer about a payment the book holds in status.
func (g simGateway) answer(status string) error {
	switch status {
	case "processing":
		return &registry.PendingError{Gateway: g.name, RetryAfter: simRetryAfter}
	case "annulled":
		return fmt.Errorf("%w: %s", registry.ErrAnnulled, g.name)
	}
	return nil
}

// Annul annuls a payment the book holds accepted; one still processing
// cannot be annulled yet (answered as still processing, nothing done).
func (g simGateway) Annul(ctx context.Context, paymentID string) error {
	f, err := g.enter(ctx)
	if err != nil {
		return err
	}
	at := g.clock.Now().UTC()
	var processing bool
	if err := g.pool.QueryRow(context.WithoutCancel(ctx), `WITH annulled AS (
			UPDATE dev_registry_ledger SET status = 'annulled', annulled_at = $2 WHERE payment_id = $1 AND status = 'accepted')
		SELECT EXISTS (SELECT 1 FROM dev_registry_ledger WHERE payment_id = $1 AND status = 'processing')`,
		paymentID, at).Scan(&processing); err != nil {
		return fmt.Errorf("%w: %s: %w", registry.ErrUnknownOutcome, g.name, err)
	}
	if f.LoseResponse {
		return fmt.Errorf("%w: %s lost the answer", registry.ErrUnknownOutcome, g.name)
	}
	if processing {
		return &registry.PendingError{Gateway: g.name, RetryAfter: simRetryAfter}
	}
	return nil
}

// OutsideGateway is the name the simulated book gives payments made
// outside rebill (at a bank, a kiosk, another app).
const OutsideGateway = "outside"

// PaidOutside records in the book a payment of amount against uin made
// outside rebill, under a payment id of its own, and returns it.
func (s Sim) PaidOutside(ctx context.Context, uin string, amount int64) (LedgerEntry, error) {
	var clk clock.Clock = clock.Wall{}
	if s.Clock != nil {
		clk = s.Clock
	}
	e := LedgerEntry{Gateway: OutsideGateway, PaymentID: "outside-" + uuid.NewString(), UIN: uin, Amount: amount,
		Status: string(registry.RegistryAccepted), At: clk.Now().UTC()}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO dev_registry_ledger (payment_id, gateway, uin, amount, status, at)
		VALUES ($1, $2, $3, $4, $5, $6)`, e.PaymentID, e.Gateway, e.UIN, e.Amount, e.Status, e.At); err != nil {
		return LedgerEntry{}, fmt.Errorf("record a payment made outside rebill: %w", err)
	}
	return e, nil
}

func (g simGateway) Quittance(ctx context.Context, uin string) (registry.Quittance, error) {
	if err := g.reachable(ctx); err != nil {
		return registry.Quittance{}, err
	}
	rows, err := g.pool.Query(ctx, `SELECT payment_id, amount, status = 'annulled', at FROM dev_registry_ledger
		WHERE uin = $1 AND status <> 'processing' ORDER BY seq`, uin)
	if err != nil {
		return registry.Quittance{}, fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	}
	var q registry.Quittance
	var paid []time.Time
	var p registry.QuittancePayment
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&p.PaymentID, &p.Amount, &p.Annulled, &at}, func() error {
		q.Payments = append(q.Payments, p)
		paid = append(paid, at)
		return nil
	}); err != nil {
		return registry.Quittance{}, fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	}
	if q.Settled, err = g.settled(ctx, uin, q.Payments, paid); err != nil {
		return registry.Quittance{}, fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	}
	return q, nil
}

// settled judges the accrual uin paid in full as GIS GMP would, by the
// fine's own rules: its standing payments, in the book's order, reach its
// full price, or its discounted price by payments made before the
// discount ended. The simulated registry knows the accrual through
// Accruals; one it does not know is never settled.
func (g simGateway) settled(ctx context.Context, uin string, payments []registry.QuittancePayment, paid []time.Time) (bool, error) {
	if g.accruals == nil {
		return false, nil
	}
	a, known, err := g.accruals(ctx, uin)
	if err != nil {
		return false, fmt.Errorf("the accrual of %s: %w", uin, err)
	}
	if !known {
		return false, nil
	}
	amount, discounted, discountEnds := a.Amount, a.Discounted, a.DiscountEnds
	var sum int64
	for i, p := range payments {
		if p.Annulled {
			continue
		}
		sum += p.Amount
		if sum >= amount || (discounted != nil && discountEnds != nil && paid[i].Before(*discountEnds) && sum >= *discounted) {
			return true, nil
		}
	}
	return false, nil
}

// reachable fails a read while the gateway is down; reads ignore the other
// faults.
func (g simGateway) reachable(ctx context.Context) error {
	var down bool
	err := g.pool.QueryRow(ctx, `SELECT down FROM dev_registry_faults WHERE gateway = $1`, g.name).Scan(&down)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	}
	if down {
		return fmt.Errorf("%w: %s is down", registry.ErrUnavailable, g.name)
	}
	return nil
}

// Lookup tells what the book holds of a payment: a look at it, which may
// end its processing.
func (g simGateway) Lookup(ctx context.Context, paymentID string) (found, annulled bool, err error) {
	if err := g.reachable(ctx); err != nil {
		return false, false, err
	}
	f, err := g.faults(ctx)
	if err != nil {
		return false, false, err
	}
	status, err := g.look(ctx, paymentID, f.AnnulUnanswered)
	switch {
	case err != nil:
		return false, false, fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	case status == "":
		return false, false, nil
	case status == "processing":
		return false, false, &registry.PendingError{Gateway: g.name, RetryAfter: simRetryAfter}
	}
	return true, status == "annulled", nil
}

// Export lists the payments this gateway took on day, as a party exports
// those it imported; a payment made outside rebill is no gateway's. The
// book keeps no time of acceptance: a payment no longer processing is
// exported as accepted when it was taken.
func (g simGateway) Export(ctx context.Context, day time.Time) ([]registry.ExportedPayment, error) {
	if err := g.reachable(ctx); err != nil {
		return nil, err
	}
	from := day.UTC().Truncate(24 * time.Hour)
	rows, err := g.pool.Query(ctx, `SELECT payment_id, uin, amount, status, at, annulled_at FROM dev_registry_ledger
		WHERE gateway = $1 AND at >= $2 AND at < $3 ORDER BY seq`, g.name, from, from.Add(24*time.Hour))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.ExportedPayment, error) {
		var p registry.ExportedPayment
		var annulledAt *time.Time
		err := row.Scan(&p.PaymentID, &p.UIN, &p.Amount, &p.Status, &p.ReceivedAt, &annulledAt)
		p.ReceivedAt = p.ReceivedAt.UTC()
		if p.Status != registry.RegistryProcessing {
			p.AcceptedAt = p.ReceivedAt
		}
		if annulledAt != nil {
			p.AnnulledAt = annulledAt.UTC()
		}
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", registry.ErrUnavailable, g.name, err)
	}
	return out, nil
}
