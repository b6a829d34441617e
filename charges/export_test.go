package charges

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Start is start for the tests of this package's verbs: what a move that
// begins an attempt enqueues, asked for twice.
func (s *Store) Start(ctx context.Context, tx pgx.Tx, cs []Charge) error { return s.start(ctx, tx, cs) }
