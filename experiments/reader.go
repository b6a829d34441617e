package experiments

import (
	"context"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/clock"
)

// ErrNotFound: no experiment has the key in the file.
var ErrNotFound = fault.New(fault.NotFound, "experiment not found")

// Reader reads the configured experiments' reports (support and admin:
// GET /v1/experiments and the console).
type Reader struct {
	Records    Records
	Set        *Set
	Clock      clock.Clock
	Commission Commission
}

// List is every configured experiment's report, in file order.
func (r *Reader) List(ctx context.Context) ([]Report, error) {
	var out []Report
	for _, e := range r.Set.List() {
		rep, err := Results(ctx, r.Records, e, r.Clock.Now(), r.Commission)
		if err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	return out, nil
}

// Get is the report of the experiment with key. Returns ErrNotFound.
func (r *Reader) Get(ctx context.Context, key string) (Report, error) {
	e, ok := r.Set.Get(key)
	if !ok {
		return Report{}, ErrNotFound
	}
	return Results(ctx, r.Records, e, r.Clock.Now(), r.Commission)
}
