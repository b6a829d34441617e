package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/rebill/rebill/rebilltype"
)

// Rolling a secret. The secret a roll replaces keeps signing deliveries
// next to the new one for the time asked (Stripe's "roll secret" with a
// delayed expiry), so a receiver can deploy the new secret without
// refusing a delivery: every delivery meanwhile carries one v1= per live
// secret, and Verify accepts any that matches. At most two secrets are
// live: a roll while an older one still signs stops that one at once.
const (
	// DefaultKeepOld is how long the replaced secret signs when the roll
	// does not say.
	DefaultKeepOld = 24 * time.Hour
	// MaxKeepOld bounds it: a leaked secret must not stay live for long.
	MaxKeepOld = 7 * 24 * time.Hour
)

func newSecret() string {
	raw := make([]byte, 24)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails
	return "whsec_" + hex.EncodeToString(raw)
}

// RollSecret gives the endpoint a new secret, in tx, and returns the
// endpoint with it (stored only sealed, like the first one). The current
// secret keeps signing for keepOld, on the database's clock (real time,
// like a signature's t, and one clock for every node); 0 stops it at once.
// Returns rebilltype.Errors for keepOld outside 0..MaxKeepOld, or
// ErrEndpointNotFound.
func (w *Webhooks) RollSecret(ctx context.Context, tx pgx.Tx, id uuid.UUID, keepOld time.Duration) (Endpoint, string, error) {
	if keepOld < 0 || keepOld > MaxKeepOld {
		return Endpoint{}, "", rebilltype.Errors{{Field: "expires_in", Message: "must be a duration from 0s to 168h (7 days)"}}
	}
	secret := newSecret()
	ep, err := scanEndpoint(tx.QueryRow(ctx, `UPDATE webhook_endpoints SET
			previous_secret = CASE WHEN $3::bigint > 0 THEN secret END,
			previous_secret_expires_at = CASE WHEN $3::bigint > 0 THEN now() + make_interval(secs => $3::bigint / 1e6) END,
			secret = $2, updated_at = $4
		WHERE id = $1 RETURNING `+endpointColumns,
		id, w.Keys.Encrypt([]byte(secret), id[:]), keepOld.Microseconds(), w.Clock.Now().UTC()))
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("roll webhook secret: %w", err)
	}
	return ep, secret, nil
}
