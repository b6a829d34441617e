package subscriptions

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Tokens seals the payment tokens that subscriptions hold in clear (rows written
// before the vault): it is the vault's TokenHolder for the subscriptions table.
type Tokens struct{}

// SealClear replaces up to limit distinct tokens in clear by the
// reference seal returns for each, in every row of subscriptions holding it, and
// returns how many rows it changed.
func (Tokens) SealClear(ctx context.Context, tx pgx.Tx, inClear string, limit int, seal func(gateway, token string) (string, error)) (int, error) {
	rows, err := tx.Query(ctx, `SELECT DISTINCT pm_gateway, pm_token FROM subscriptions WHERE `+inClear+` LIMIT $1`, limit)
	if err != nil {
		return 0, fmt.Errorf("find subscriptions' tokens in clear: %w", err)
	}
	type pair struct{ gateway, token string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pair, error) {
		var p pair
		return p, r.Scan(&p.gateway, &p.token)
	})
	if err != nil {
		return 0, fmt.Errorf("find subscriptions' tokens in clear: %w", err)
	}
	changed := 0
	for _, p := range found {
		ref, err := seal(p.gateway, p.token)
		if err != nil {
			return changed, err
		}
		tag, err := tx.Exec(ctx, `UPDATE subscriptions SET pm_token = $3 WHERE pm_gateway = $1 AND pm_token = $2`, p.gateway, p.token, ref)
		if err != nil {
			return changed, fmt.Errorf("seal subscriptions' token: %w", err)
		}
		changed += int(tag.RowsAffected())
	}
	return changed, nil
}

// CountClear counts the rows of subscriptions holding a token in clear.
func (Tokens) CountClear(ctx context.Context, tx pgx.Tx, inClear string) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM subscriptions WHERE `+inClear).Scan(&n); err != nil {
		return 0, fmt.Errorf("count subscriptions' tokens in clear: %w", err)
	}
	return n, nil
}
