package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/clock"
)

// ErrInvalidFaults is returned by [Store.SetFaults] for a negative latency
// or an error rate outside [0, 1].
var ErrInvalidFaults = errors.New("invalid gateway faults")

type cachedFaults struct {
	faults Faults
	read   time.Time // real time: the cache's age, not the service clock
}

// CacheFaults makes s keep each gateway's fault switches for ttl instead of
// reading them on every call (two reads a charge), and returns s. Only for
// a store that is the one writer of its database's switches (the
// `rebill gatewaysim` process, a benchmark): a change made through s is
// seen at once, one made by another writer within ttl. Dev mode's in-process
// sims share rebill's database across nodes and do not cache.
func (s *Store) CacheFaults(ttl time.Duration) *Store {
	s.faultsTTL = ttl
	s.cached = map[string]cachedFaults{}
	return s
}

func (s *Store) remember(gw string, f Faults) {
	if s.faultsTTL <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cached[gw] = cachedFaults{faults: f, read: clock.Wall{}.Now()}
}

func (s *Store) recalled(gw string) (Faults, bool) {
	if s.faultsTTL <= 0 {
		return Faults{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cached[gw]
	return c.faults, ok && clock.Wall{}.Now().Sub(c.read) < s.faultsTTL
}

// Faults are a gateway's fault switches.
type Faults struct {
	Down         bool    `json:"down"`
	LatencyMS    int     `json:"latency_ms"`
	ErrorRate    float64 `json:"error_rate"`
	CapturesDown bool    `json:"captures_down"`
	// RefundsDown answers refunds 503, doing nothing; RefundsLost performs
	// every refund and loses its answer.
	RefundsDown bool `json:"refunds_down"`
	RefundsLost bool `json:"refunds_lost"`
}

// FaultsPatch changes only the switches that are set.
type FaultsPatch struct {
	Down         *bool    `json:"down,omitempty"`
	LatencyMS    *int     `json:"latency_ms,omitempty"`
	ErrorRate    *float64 `json:"error_rate,omitempty"`
	CapturesDown *bool    `json:"captures_down,omitempty"`
	RefundsDown  *bool    `json:"refunds_down,omitempty"`
	RefundsLost  *bool    `json:"refunds_lost,omitempty"`
}

// validate returns ErrInvalidFaults for a negative latency or an error rate
// outside [0, 1].
func (p FaultsPatch) validate() error {
	if p.LatencyMS != nil && *p.LatencyMS < 0 {
		return fmt.Errorf("%w: latency_ms %d is negative", ErrInvalidFaults, *p.LatencyMS)
	}
	if p.ErrorRate != nil && (*p.ErrorRate < 0 || *p.ErrorRate > 1) {
		return fmt.Errorf("%w: error_rate %v is outside [0, 1]", ErrInvalidFaults, *p.ErrorRate)
	}
	return nil
}

// Faults returns gw's fault switches; a gateway never configured has none.
func (s *Store) Faults(ctx context.Context, gw string) (Faults, error) {
	if f, ok := s.recalled(gw); ok {
		return f, nil
	}
	var f Faults
	err := s.pool.QueryRow(ctx, `SELECT down, latency_ms, error_rate, captures_down, refunds_down, refunds_lost
		FROM gatewaysim.faults WHERE gateway = $1`, gw).Scan(&f.Down, &f.LatencyMS, &f.ErrorRate, &f.CapturesDown,
		&f.RefundsDown, &f.RefundsLost)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil // a gateway never configured has none
	}
	if err != nil {
		return Faults{}, fmt.Errorf("read faults of %s: %w", gw, err)
	}
	s.remember(gw, f)
	return f, nil
}

// SetFaults changes the switches set in p and returns all of gw's switches.
// Returns ErrInvalidFaults for a negative latency or an error rate outside
// [0, 1].
func (s *Store) SetFaults(ctx context.Context, gw string, p FaultsPatch) (Faults, error) {
	if err := p.validate(); err != nil {
		return Faults{}, err
	}
	var f Faults
	err := s.pool.QueryRow(ctx, `
		INSERT INTO gatewaysim.faults AS f (gateway, down, latency_ms, error_rate, captures_down, refunds_down, refunds_lost)
		VALUES ($1, coalesce($2::boolean, false), coalesce($3::integer, 0), coalesce($4::double precision, 0),
			coalesce($5::boolean, false), coalesce($6::boolean, false), coalesce($7::boolean, false))
		ON CONFLICT (gateway) DO UPDATE SET
			down          = coalesce($2::boolean, f.down),
			latency_ms    = coalesce($3::integer, f.latency_ms),
			error_rate    = coalesce($4::double precision, f.error_rate),
			captures_down = coalesce($5::boolean, f.captures_down),
			refunds_down  = coalesce($6::boolean, f.refunds_down),
			refunds_lost  = coalesce($7::boolean, f.refunds_lost)
		RETURNING down, latency_ms, error_rate, captures_down, refunds_down, refunds_lost`,
		gw, p.Down, p.LatencyMS, p.ErrorRate, p.CapturesDown, p.RefundsDown, p.RefundsLost).
		Scan(&f.Down, &f.LatencyMS, &f.ErrorRate, &f.CapturesDown, &f.RefundsDown, &f.RefundsLost)
	if err != nil {
		return Faults{}, fmt.Errorf("set faults of %s: %w", gw, err)
	}
	s.remember(gw, f)
	return f, nil
}
