package notify

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/platform/secrets"
)

// ResealSecrets seals again, under the current key of keys, up to limit
// webhook signing secrets sealed under an older key, and returns how many
// (0 once none is left). Each call commits on its own and skips rows
// another call holds, so a rotation stopped midway resumes. A secret under
// a key the ring no longer has is an error naming that key.
func ResealSecrets(ctx context.Context, pool *pgxpool.Pool, keys *secrets.Keyring, limit int) (int, error) {
	done := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, secret, previous_secret FROM webhook_endpoints
			WHERE NOT starts_with(secret, $1) OR NOT starts_with(previous_secret, $1)
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, keys.Current()+":", limit)
		if err != nil {
			return fmt.Errorf("find webhook secrets under old keys: %w", err)
		}
		type row struct {
			id               uuid.UUID
			sealed           string
			previous         *string // the secret a roll replaced, sealed too
			resealedPrevious *string
		}
		found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.sealed, &x.previous)
		})
		if err != nil {
			return fmt.Errorf("find webhook secrets under old keys: %w", err)
		}
		for _, r := range found {
			secret, err := keys.Decrypt(r.sealed, r.id[:])
			if err != nil {
				return fmt.Errorf("open secret of webhook endpoint %s: %w", r.id, err)
			}
			if r.previous != nil {
				previous, err := keys.Decrypt(*r.previous, r.id[:])
				if err != nil {
					return fmt.Errorf("open previous secret of webhook endpoint %s: %w", r.id, err)
				}
				sealed := keys.Encrypt(previous, r.id[:])
				r.resealedPrevious = &sealed
			}
			if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET secret = $2, previous_secret = $3 WHERE id = $1`,
				r.id, keys.Encrypt(secret, r.id[:]), r.resealedPrevious); err != nil {
				return fmt.Errorf("reseal secret of webhook endpoint %s: %w", r.id, err)
			}
		}
		done = len(found)
		return nil
	})
	return done, err
}
