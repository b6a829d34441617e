// Package vault keeps payment tokens at rest: subscriptions, charges and
// enrollments hold a reference (ptok_<uuid>) in pm_token, and the token itself lives
// only in payment_tokens, sealed with AES-GCM under REBILL_ENCRYPTION_KEY
// (platform/secrets). A database dump alone yields no usable token.
//
// # One reference per card
//
// [Vault.Seal] returns the reference a token already has (found by its
// fingerprint, an HMAC under a key derived from the encryption key, never
// the token in clear), so the same card given again keeps its reference
// and the comparisons of references in usecases and charges (same card,
// card changed) still hold.
//
// # Opening
//
// Tokens are opened at the gateway edge only: [Vault.Gateway] wraps a
// gateway and replaces the reference of each request by the token. A
// request whose caller read the sealed token already ([SealedSQL], in the
// statement that starts the attempt) is opened from it with no read; any
// other is read by [Vault.Open]. A value that is not a reference is a
// token written in clear before the vault (or by code that bypassed it):
// it is passed as it is, and [Vault.Reseal] moves it into the vault.
package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/platform/secrets"
)

// refPrefix starts every reference; payment_tokens.id is one.
const refPrefix = "ptok_"

// ErrNotFound: a reference names no sealed token.
var ErrNotFound = errors.New("payment token not found")

// Vault seals and opens payment tokens.
type Vault struct {
	// Pool opens tokens for gateway calls and runs Reseal.
	Pool *pgxpool.Pool
	Keys *secrets.Keyring
	// Holders are the stores whose rows hold payment tokens.
	Holders []TokenHolder
}

// refPattern is a reference exactly as Seal writes it (the canonical
// UUID form); clearToken in SQL is its negation.
var refPattern = regexp.MustCompile(`^ptok_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// IsRef reports whether v is a vault reference rather than a token.
func IsRef(v string) bool { return refPattern.MatchString(v) }

// aad binds a ciphertext to its row: one copied to another row (another
// card's reference) does not open.
func aad(id, gateway string) []byte { return []byte(id + "\x00" + gateway) }

func fingerprintInput(gateway, token string) []byte { return []byte(gateway + "\x00" + token) }

// Seal stores token, issued by gateway, in db (the caller's transaction)
// and returns its reference: the existing one when the vault has the
// token already, under any key of the ring. Looking the token up and
// sealing it is one statement, so a create pays one round trip for its
// card, new or known.
func (v *Vault) Seal(ctx context.Context, db pg.DBTX, gateway, token string) (string, error) {
	s, args, err := v.sealing(gateway, token)
	if err != nil {
		return "", err
	}
	found, err := s.scan(db.QueryRow(ctx, sealSQL, args...))
	if err != nil {
		return "", err
	}
	s.read, s.found = true, found
	return s.Ref(ctx, db)
}

// Sealing is a seal queued by [Vault.QueueSeal].
type Sealing struct {
	gateway     string
	fingerprint []byte
	ref         string
	read, found bool
}

// QueueSeal queues Seal's statement on b, for a caller that sends b in its
// transaction with statements of its own, so that sealing the card costs
// no round trip of its own. The statement's error is the batch's (its
// Close); the reference is read from the returned Sealing once b's
// results are.
func (v *Vault) QueueSeal(b *pgx.Batch, gateway, token string) (*Sealing, error) {
	s, args, err := v.sealing(gateway, token)
	if err != nil {
		return nil, err
	}
	b.Queue(sealSQL, args...).QueryRow(func(row pgx.Row) error {
		found, err := s.scan(row)
		s.read, s.found = err == nil, found
		return err
	})
	return s, nil
}

// Ref returns the reference of the sealed token, in db, the transaction
// the batch of QueueSeal was sent in: read by the queued statement, or,
// when a concurrent seal of the same token won, read by one more
// statement.
func (s *Sealing) Ref(ctx context.Context, db pg.DBTX) (string, error) {
	if !s.read {
		return "", fmt.Errorf("seal payment token: its batch was not sent")
	}
	if s.found {
		return s.ref, nil
	}
	// A concurrent seal of the same token waited on the unique index, then
	// inserted nothing and returned no row; this statement (a new snapshot:
	// READ COMMITTED) sees the reference the other one committed.
	var ref string
	if err := db.QueryRow(ctx, `SELECT id FROM payment_tokens WHERE gateway = $1 AND fingerprint = $2`,
		s.gateway, s.fingerprint).Scan(&ref); err != nil {
		return "", fmt.Errorf("seal payment token: %w", err)
	}
	s.ref, s.found = ref, true
	return ref, nil
}

// sealing returns the seal of token under a new reference and sealSQL's
// arguments for it.
func (v *Vault) sealing(gateway, token string) (*Sealing, []any, error) {
	data := fingerprintInput(gateway, token)
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, nil, fmt.Errorf("new payment token id: %w", err)
	}
	ref := refPrefix + id.String()
	current := v.Keys.Current()
	fingerprint := v.Keys.Fingerprint(current, data)
	s := &Sealing{gateway: gateway, fingerprint: fingerprint, ref: ref}
	return s, []any{ref, gateway, fingerprint, current, v.Keys.Encrypt([]byte(token), aad(ref, gateway)),
		v.Keys.Fingerprints(data)}, nil
}

// scan reads sealSQL's row into s.ref; false when there is none (a
// concurrent seal of the same token won, see Ref).
func (s *Sealing) scan(row pgx.Row) (bool, error) {
	err := row.Scan(&s.ref)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("seal payment token: %w", err)
	}
	return true, nil
}

// sealSQL returns the reference the token has already, under any key of
// the ring ($6 its fingerprints), or seals it under $1. A concurrent seal
// of the same token waits on the unique index, then inserts nothing and
// returns no row.
const sealSQL = `WITH found AS (
		SELECT id FROM payment_tokens WHERE gateway = $2 AND fingerprint = ANY($6) LIMIT 1
	), sealed AS (
		INSERT INTO payment_tokens (id, gateway, fingerprint, key_id, ciphertext)
		SELECT $1::text, $2, $3::bytea, $4::text, $5::text WHERE NOT EXISTS (SELECT FROM found)
		ON CONFLICT (gateway, fingerprint) DO NOTHING RETURNING id
	)
	SELECT id FROM found UNION ALL SELECT id FROM sealed`

// SealedSQL is an SQL expression that yields the sealed form of the token
// whose reference is in ref (a column or expression of the caller's
// statement), as [Vault.OpenSealed] takes it; NULL when ref names no
// sealed token (a token in clear, an unknown reference). A statement that
// reads a reference anyway (the charge pipeline's "about to call") returns
// it with the row, so that the gateway edge opens the token without a
// read of its own: one statement less per call.
func SealedSQL(ref string) string {
	return `(SELECT json_build_array(gateway, ciphertext)::text FROM payment_tokens WHERE id = ` + ref + `)`
}

// OpenSealed returns the token ref names from sealed, what SealedSQL
// yielded for it, without reading the database. The ciphertext opens only
// under the reference and gateway it was sealed for, so a sealed form read
// for another reference is refused rather than sent. A value that is no
// reference is a token in clear and is returned as it is.
func (v *Vault) OpenSealed(ref, sealed string) (string, error) {
	if !IsRef(ref) {
		return ref, nil
	}
	var row [2]string // the gateway the token was issued by, its ciphertext
	if err := json.Unmarshal([]byte(sealed), &row); err != nil {
		return "", fmt.Errorf("open payment token %s: malformed sealed token", ref)
	}
	token, err := v.Keys.Decrypt(row[1], aad(ref, row[0]))
	if err != nil {
		return "", fmt.Errorf("open payment token %s: %w", ref, err)
	}
	return string(token), nil
}

// Open returns the token a reference names; a value that is no reference
// is a token in clear and is returned as it is. Returns ErrNotFound.
func (v *Vault) Open(ctx context.Context, db pg.DBTX, ref string) (string, error) {
	if !IsRef(ref) {
		return ref, nil
	}
	var gateway, sealed string
	err := db.QueryRow(ctx, `SELECT gateway, ciphertext FROM payment_tokens WHERE id = $1`, ref).Scan(&gateway, &sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return "", fmt.Errorf("read payment token: %w", err)
	}
	token, err := v.Keys.Decrypt(sealed, aad(ref, gateway))
	if err != nil {
		return "", fmt.Errorf("open payment token %s: %w", ref, err)
	}
	return string(token), nil
}
