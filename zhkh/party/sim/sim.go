// Package sim is dev mode's simulated GIS ZhKH party: named parties
// (party.Party) over one ledger of payment information in the database
// (dev_zhkh_ledger, shared by every node), with fault switches, like the
// simulated registry (charges/registry/sim).
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/zhkh/party"
)

// Names are dev mode's simulated parties.
var Names = []string{"zhkh1"}

// Sim is the simulated party: one ledger reached through named parties.
type Sim struct {
	Pool *pgxpool.Pool
	// Clock stamps the ledger: the service clock (the dev clock), so the
	// ledger reads on the days rebill's records do. Nil: real time.
	Clock clock.Clock
	// Names are its parties' names; nil: Names.
	Names []string
}

func (s Sim) names() []string {
	if s.Names == nil {
		return Names
	}
	return s.Names
}

// Parties returns the simulated parties.
func (s Sim) Parties() []party.Party {
	var clk clock.Clock = clock.Wall{}
	if s.Clock != nil {
		clk = s.Clock
	}
	out := make([]party.Party, len(s.names()))
	for i, name := range s.names() {
		out[i] = simParty{name: name, pool: s.Pool, clock: clk}
	}
	return out
}

// Known reports whether name is a simulated party.
func (s Sim) Known(name string) bool { return slices.Contains(s.names(), name) }

// LedgerEntry is one report in the simulated ledger: the payment
// information as the party was given it, and what GIS ZhKH made of it.
type LedgerEntry struct {
	Party             string `json:"party"`
	ReportID          string `json:"report_id"`
	Account           string `json:"account"`
	BillID            string `json:"bill_id"`
	PaymentDocumentID string `json:"payment_document_id,omitempty"`
	ServiceID         string `json:"service_id,omitempty"`
	Period            string `json:"period,omitempty"`
	SupplierINN       string `json:"supplier_inn,omitempty"`
	Amount            int64  `json:"amount"`
	Currency          string `json:"currency"`
	// Status is processing, accepted, refused or cancelled.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// PaidAt is the payment's time as reported; At when the party first
	// held the report; CancelledAt when it was annulled.
	PaidAt      time.Time  `json:"paid_at"`
	At          time.Time  `json:"at"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
}

// Ledger lists the ledger, oldest first.
func (s Sim) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	rows, err := s.Pool.Query(ctx, `SELECT party, report_id, account, bill_id, coalesce(payment_document_id, ''),
			coalesce(service_id, ''), coalesce(period, ''), coalesce(supplier_inn, ''), amount, currency,
			status, coalesce(reason, ''), paid_at, at, cancelled_at
		FROM dev_zhkh_ledger ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("zhkh ledger: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LedgerEntry, error) {
		var e LedgerEntry
		err := row.Scan(&e.Party, &e.ReportID, &e.Account, &e.BillID, &e.PaymentDocumentID, &e.ServiceID, &e.Period,
			&e.SupplierINN, &e.Amount, &e.Currency, &e.Status, &e.Reason, &e.PaidAt, &e.At, &e.CancelledAt)
		e.PaidAt, e.At = e.PaidAt.UTC(), e.At.UTC()
		if e.CancelledAt != nil {
			t := e.CancelledAt.UTC()
			e.CancelledAt = &t
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("zhkh ledger: %w", err)
	}
	return out, nil
}

// Faults are a simulated party's switches.
type Faults struct {
	Down bool `json:"down"`
	// ErrorRate is the share of calls (reports, annulments, look-ups)
	// that fail before they reach the ledger, as if the party were out of
	// reach: 0..1.
	ErrorRate    float64 `json:"error_rate"`
	LoseResponse bool    `json:"lose_response"`
	// Processing is how many looks (the report, its replays and look-ups)
	// a report made meanwhile answers "still processing" to before GIS
	// ZhKH answers.
	Processing int `json:"processing"`
	// Refuse, when set, is the reason GIS ZhKH refuses every report made
	// meanwhile with.
	Refuse string `json:"refuse"`
}

// FaultsPatch changes the given switches.
type FaultsPatch struct {
	Down         *bool    `json:"down"`
	ErrorRate    *float64 `json:"error_rate"`
	LoseResponse *bool    `json:"lose_response"`
	Processing   *int     `json:"processing"`
	Refuse       *string  `json:"refuse"`
}

// SetFaults applies patch to name's switches and returns them.
func (s Sim) SetFaults(ctx context.Context, name string, patch FaultsPatch) (Faults, error) {
	var f Faults
	err := s.Pool.QueryRow(ctx, `INSERT INTO dev_zhkh_faults AS f (party, down, lose_response, processing, refuse, error_rate)
		VALUES ($1, coalesce($2, false), coalesce($3, false), coalesce($4, 0), coalesce($5, ''), coalesce($6, 0))
		ON CONFLICT (party) DO UPDATE SET down = coalesce($2, f.down), lose_response = coalesce($3, f.lose_response),
			processing = coalesce($4, f.processing), refuse = coalesce($5, f.refuse), error_rate = coalesce($6, f.error_rate)
		RETURNING down, error_rate, lose_response, processing, refuse`,
		name, patch.Down, patch.LoseResponse, patch.Processing, patch.Refuse, patch.ErrorRate).
		Scan(&f.Down, &f.ErrorRate, &f.LoseResponse, &f.Processing, &f.Refuse)
	if err != nil {
		return Faults{}, fmt.Errorf("set zhkh party faults: %w", err)
	}
	return f, nil
}

type simParty struct {
	name  string
	pool  *pgxpool.Pool
	clock clock.Clock
}

func (p simParty) Name() string { return p.name }

func (p simParty) faults(ctx context.Context) (Faults, error) {
	var f Faults
	err := p.pool.QueryRow(ctx, `SELECT down, error_rate, lose_response, processing, refuse FROM dev_zhkh_faults WHERE party = $1`, p.name).
		Scan(&f.Down, &f.ErrorRate, &f.LoseResponse, &f.Processing, &f.Refuse)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Faults{}, fmt.Errorf("%w: %s: %w", party.ErrUnavailable, p.name, err)
	}
	if f.Down {
		return Faults{}, fmt.Errorf("%w: %s is down", party.ErrUnavailable, p.name)
	}
	if f.ErrorRate > 0 && rand.Float64() < f.ErrorRate {
		return Faults{}, fmt.Errorf("%w: %s failed (error rate %.2f)", party.ErrUnavailable, p.name, f.ErrorRate)
	}
	return f, nil
}

// simRetryAfter is what the simulated party asks of a caller whose report
// is still processing.
const simRetryAfter = time.Second

// Report records the payment information, or answers a replay with what
// the ledger holds.
func (p simParty) Report(ctx context.Context, pay party.Payment) error {
	f, err := p.faults(ctx)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	status, reason := "accepted", ""
	if f.Refuse != "" {
		status, reason = "refused", f.Refuse
	}
	if f.Processing > 0 {
		status = "processing"
	}
	if _, err := p.pool.Exec(ctx, `INSERT INTO dev_zhkh_ledger (report_id, party, account, bill_id, payment_document_id,
			service_id, period, supplier_inn, amount, currency, paid_at, status, reason, looks_left, at)
		VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), nullif($7, ''), nullif($8, ''), $9, $10, $11, $12, nullif($13, ''), $14, $15)
		ON CONFLICT (report_id) DO NOTHING`,
		pay.ReportID, p.name, pay.Account, pay.BillID, pay.PaymentDocumentID, pay.ServiceID, pay.Period, pay.SupplierINN,
		pay.Amount, pay.Currency, pay.PaidAt.UTC(), status, reason, f.Processing, p.clock.Now().UTC()); err != nil {
		return fmt.Errorf("%w: %s: %w", party.ErrUnknownOutcome, p.name, err)
	}
	status, reason, err = p.look(ctx, pay.ReportID)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", party.ErrUnknownOutcome, p.name, err)
	}
	if f.LoseResponse {
		return fmt.Errorf("%w: %s lost the answer", party.ErrUnknownOutcome, p.name)
	}
	switch party.Status(status) {
	case party.StatusProcessing:
		return &party.PendingError{Party: p.name, RetryAfter: simRetryAfter}
	case party.StatusRefused:
		return &party.RefusedError{Party: p.name, Reason: reason}
	case party.StatusCancelled:
		return fmt.Errorf("%w: %s", party.ErrCancelled, p.name)
	}
	return nil
}

// look counts one look at a report and returns its status: one still
// processing is accepted (or refused, when it was made under Refuse) once
// its looks are used up. "" when the ledger does not hold it.
func (p simParty) look(ctx context.Context, reportID string) (string, string, error) {
	var status, reason string
	err := p.pool.QueryRow(ctx, `UPDATE dev_zhkh_ledger SET looks_left = greatest(looks_left - 1, 0),
			status = CASE WHEN status <> $2 OR looks_left > 0 THEN status
				WHEN reason IS NOT NULL THEN $3 ELSE $4 END
		WHERE report_id = $1 RETURNING status, coalesce(reason, '')`, reportID, party.StatusProcessing, party.StatusRefused,
		party.StatusAccepted).Scan(&status, &reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("look at report %s: %w", reportID, err)
	}
	return status, reason, nil
}

// Cancel annuls accepted payment information; one still processing
// cannot be annulled yet (answered as still processing, nothing done).
func (p simParty) Cancel(ctx context.Context, reportID string) error {
	f, err := p.faults(ctx)
	if err != nil {
		return err
	}
	var processing bool
	if err := p.pool.QueryRow(context.WithoutCancel(ctx), `WITH cancelled AS (
			UPDATE dev_zhkh_ledger SET status = $3, cancelled_at = $2 WHERE report_id = $1 AND status = $4)
		SELECT EXISTS (SELECT 1 FROM dev_zhkh_ledger WHERE report_id = $1 AND status = $5)`,
		reportID, p.clock.Now().UTC(), party.StatusCancelled, party.StatusAccepted, party.StatusProcessing).Scan(&processing); err != nil {
		return fmt.Errorf("%w: %s: %w", party.ErrUnknownOutcome, p.name, err)
	}
	if f.LoseResponse {
		return fmt.Errorf("%w: %s lost the answer", party.ErrUnknownOutcome, p.name)
	}
	if processing {
		return &party.PendingError{Party: p.name, RetryAfter: simRetryAfter}
	}
	return nil
}

// Lookup tells what the ledger holds of a report: a look at it, which may
// end its processing.
func (p simParty) Lookup(ctx context.Context, reportID string) (party.Status, string, error) {
	if _, err := p.faults(ctx); err != nil {
		return "", "", err
	}
	status, reason, err := p.look(ctx, reportID)
	if err != nil {
		return "", "", fmt.Errorf("%w: %s: %w", party.ErrUnavailable, p.name, err)
	}
	if status == "" {
		return party.StatusNotFound, "", nil
	}
	return party.Status(status), reason, nil
}
