package vault

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TableTokens is the TokenHolder of one table whose rows keep a payment
// token in pm_token beside the gateway that issued it. The store that owns
// the table makes its own (subscriptions.Tokens, charges.Tokens,
// enrollments.Tokens), so each table is sealed on its owner's word and the
// statements are written once.
type TableTokens struct {
	// Table is the table, and Gateway its column naming the token's
	// gateway; both are constants of the owning package.
	Table, Gateway string
}

// SealClear replaces up to limit distinct tokens in clear by the
// reference seal returns for each, in every row of the table holding it,
// and returns how many rows it changed.
func (h TableTokens) SealClear(ctx context.Context, tx pgx.Tx, inClear string, limit int, seal func(gateway, token string) (string, error)) (int, error) {
	table, gateway := pgx.Identifier{h.Table}.Sanitize(), pgx.Identifier{h.Gateway}.Sanitize()
	rows, err := tx.Query(ctx, `SELECT DISTINCT `+gateway+`, pm_token FROM `+table+` WHERE `+inClear+` LIMIT $1`, limit)
	if err != nil {
		return 0, fmt.Errorf("find %s' tokens in clear: %w", h.Table, err)
	}
	type pair struct{ gateway, token string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pair, error) {
		var p pair
		return p, r.Scan(&p.gateway, &p.token)
	})
	if err != nil {
		return 0, fmt.Errorf("find %s' tokens in clear: %w", h.Table, err)
	}
	changed := 0
	for _, p := range found {
		ref, err := seal(p.gateway, p.token)
		if err != nil {
			return changed, err
		}
		tag, err := tx.Exec(ctx, `UPDATE `+table+` SET pm_token = $3 WHERE `+gateway+` = $1 AND pm_token = $2`, p.gateway, p.token, ref)
		if err != nil {
			return changed, fmt.Errorf("seal %s' token: %w", h.Table, err)
		}
		changed += int(tag.RowsAffected())
	}
	return changed, nil
}

// CountClear counts the rows of the table holding a token in clear.
func (h TableTokens) CountClear(ctx context.Context, tx pgx.Tx, inClear string) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{h.Table}.Sanitize()+` WHERE `+inClear).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s' tokens in clear: %w", h.Table, err)
	}
	return n, nil
}
