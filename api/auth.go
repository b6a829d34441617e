package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/subscriptions"
)

// Role is what an API key may do.
type Role string

// The roles of API.md.
const (
	RoleAdmin    Role = "admin"
	RoleSupport  Role = "support"
	RoleCustomer Role = "customer"
)

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleSupport, RoleCustomer:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want admin, support or customer)", s)
}

// Principal is the authenticated caller.
type Principal struct {
	KeyID      string
	Role       Role
	CustomerID string // set for RoleCustomer only
}

// Actor is the principal as the author of a subscription event.
func (p Principal) Actor() subscriptions.Actor {
	return subscriptions.Actor{ID: p.KeyID, Role: string(p.Role)}
}

// IdempotencyScope is the namespace of the principal's idempotency keys. A
// customer's keys are scoped to the customer, like Stripe scopes keys to an
// account, so a retry survives the rotation of its API key; staff keys are
// scoped to the key itself.
func (p Principal) IdempotencyScope() string {
	if p.Role == RoleCustomer {
		return "customer:" + p.CustomerID
	}
	return "key:" + p.KeyID
}

// canSee reports whether the principal may read or change an object of
// customerID; a customer sees only its own.
func (p Principal) canSee(customerID string) bool {
	return p.Role != RoleCustomer || p.CustomerID == customerID
}

type principalKey struct{}

func principalFrom(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// BootstrapKeyID is the key id reported for REBILL_ADMIN_KEY, which has no
// database row.
const BootstrapKeyID = "bootstrap-admin"

// keyPrefix makes rebill keys recognisable to secret scanners.
const keyPrefix = "rbk_"

// ErrUnauthenticated: the key is missing or not one rebill issued.
var ErrUnauthenticated = errors.New("invalid API key")

// Keys authenticates API keys. Only SHA-256 hashes of keys are stored: keys
// are 256 random bits, so a fast hash is as safe as a slow one here.
type Keys struct {
	pool          *pgxpool.Pool
	bootstrapHash []byte // nil when REBILL_ADMIN_KEY is unset
}

// NewKeys returns an authenticator; bootstrapKey (may be empty) is
// accepted as an admin key without a database row.
func NewKeys(pool *pgxpool.Pool, bootstrapKey string) *Keys {
	k := &Keys{pool: pool}
	if bootstrapKey != "" {
		h := sha256.Sum256([]byte(bootstrapKey))
		k.bootstrapHash = h[:]
	}
	return k
}

// Authenticate maps a bearer token to its principal. Returns
// ErrUnauthenticated, or a wrapped database error.
func (k *Keys) Authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, ErrUnauthenticated
	}
	sum := sha256.Sum256([]byte(token))
	if k.bootstrapHash != nil && subtle.ConstantTimeCompare(sum[:], k.bootstrapHash) == 1 {
		return Principal{KeyID: BootstrapKeyID, Role: RoleAdmin}, nil
	}
	var (
		p          Principal
		id         uuid.UUID
		stored     []byte
		customerID *string
	)
	err := k.pool.QueryRow(ctx, `SELECT id, key_hash, role, customer_id FROM api_keys WHERE key_hash = $1`, sum[:]).
		Scan(&id, &stored, &p.Role, &customerID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrUnauthenticated
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up API key: %w", err)
	}
	if subtle.ConstantTimeCompare(sum[:], stored) != 1 {
		return Principal{}, ErrUnauthenticated
	}
	p.KeyID = id.String()
	if customerID != nil {
		p.CustomerID = *customerID
	}
	return p, nil
}

// CreatedKey is a new API key; Key is shown once and never stored (a
// replay of its creation returns the object without it).
type CreatedKey struct {
	ID         string `json:"id"`
	Key        string `json:"key,omitempty"`
	Role       Role   `json:"role"`
	CustomerID string `json:"customer_id,omitempty"`
}

// DB is what key creation needs: a pool or a transaction.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateKey issues a key for role (customerID is required for customers
// and refused otherwise) and stores its hash.
func CreateKey(ctx context.Context, db DB, role Role, customerID string) (CreatedKey, error) {
	if (role == RoleCustomer) != (customerID != "") {
		return CreatedKey{}, errors.New("customer_id is required for the customer role and only for it")
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return CreatedKey{}, fmt.Errorf("generate key: %w", err)
	}
	key := keyPrefix + base64.RawURLEncoding.EncodeToString(secret)
	sum := sha256.Sum256([]byte(key))
	id, err := uuid.NewV7()
	if err != nil {
		return CreatedKey{}, fmt.Errorf("new key id: %w", err)
	}
	var cust *string
	if customerID != "" {
		cust = &customerID
	}
	var stored uuid.UUID
	if err := db.QueryRow(ctx, `INSERT INTO api_keys (id, key_hash, role, customer_id) VALUES ($1, $2, $3, $4) RETURNING id`,
		id, sum[:], role, cust).Scan(&stored); err != nil {
		return CreatedKey{}, fmt.Errorf("store API key: %w", err)
	}
	return CreatedKey{ID: stored.String(), Key: key, Role: role, CustomerID: customerID}, nil
}

// EnsureFirstAdminKey creates an admin key when the database has none, so
// that a fresh install can be used without configuration. created is false
// when an admin key already existed; concurrent nodes create at most one.
func EnsureFirstAdminKey(ctx context.Context, pool *pgxpool.Pool) (key CreatedKey, created bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('rebill-first-admin-key'))`); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE role = 'admin')`).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		key, err = CreateKey(ctx, tx, RoleAdmin, "")
		created = err == nil
		return err
	})
	if err != nil {
		return CreatedKey{}, false, fmt.Errorf("ensure first admin key: %w", err)
	}
	return key, created, nil
}

// authenticate resolves the bearer token; 401 when missing or wrong, 503
// when the key store cannot be read.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			writeProblem(w, problemUnauthorized)
			return
		}
		p, err := s.Keys.Authenticate(r.Context(), token)
		if errors.Is(err, ErrUnauthenticated) {
			writeProblem(w, problemUnauthorized)
			return
		}
		if err != nil {
			s.Logger.Error().Err(err).Msg("authentication failed")
			w.Header().Set("Retry-After", "1")
			writeProblem(w, problemUnavailable)
			return
		}
		setLogKeyID(r.Context(), p.KeyID)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// bearerToken returns the credentials of an `Authorization: Bearer <key>`
// header. Auth schemes are case-insensitive (RFC 9110, section 11.1), so
// clients that send `bearer` are not refused.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// requireRole answers 403 unless the principal has one of roles.
func requireRole(roles ...Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := principalFrom(r.Context())
			for _, role := range roles {
				if p.Role == role {
					next.ServeHTTP(w, r)
					return
				}
			}
			writeProblem(w, problemForbidden)
		})
	}
}
