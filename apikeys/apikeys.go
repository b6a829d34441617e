// Package apikeys issues and checks the API keys that clients and staff
// authenticate with. Only SHA-256 hashes of keys are stored: keys are 256
// random bits, so a fast hash is as safe as a slow one here, and a
// database dump yields no usable key. A key is shown once, when it is
// created.
package apikeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rebill/rebill/rebilltype"
)

// Role is what an API key may do.
type Role string

// The roles of the API contract.
const (
	// Admin may do everything, creating keys included.
	Admin Role = "admin"
	// Support reads everything, pauses, resumes and cancels any
	// subscription, resolves and retries charges.
	Support Role = "support"
	// Customer touches only its own customer's objects.
	Customer Role = "customer"
)

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case Admin, Support, Customer:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want admin, support or customer)", s)
}

// BootstrapKeyID is the key id reported for the bootstrap admin key
// (REBILL_ADMIN_KEY), which has no database row.
const BootstrapKeyID = "bootstrap-admin"

// keyPrefix makes rebill keys recognisable to secret scanners.
const keyPrefix = "rbk_"

// ErrUnauthenticated: the key is missing or not one rebill issued.
var ErrUnauthenticated = errors.New("invalid API key")

// Key is an authenticated API key.
type Key struct {
	ID         string
	Role       Role
	CustomerID string // set for Customer only
}

// Created is a new API key; Secret is shown once and never stored.
type Created struct {
	Key
	Secret string
}

// Store issues and authenticates keys.
type Store struct {
	pool          *pgxpool.Pool
	bootstrapHash []byte // nil when no bootstrap key is configured
}

// NewStore returns a store over pool; bootstrapKey (may be empty) is
// accepted as an admin key without a database row.
func NewStore(pool *pgxpool.Pool, bootstrapKey string) *Store {
	s := &Store{pool: pool}
	if bootstrapKey != "" {
		h := sha256.Sum256([]byte(bootstrapKey))
		s.bootstrapHash = h[:]
	}
	return s
}

// Authenticate maps a bearer token to its key. Returns ErrUnauthenticated,
// or a wrapped database error.
func (s *Store) Authenticate(ctx context.Context, token string) (Key, error) {
	if token == "" {
		return Key{}, ErrUnauthenticated
	}
	return s.ByFingerprint(ctx, Fingerprint(token))
}

// Fingerprint is the SHA-256 of a key, which api_keys stores: what a
// console session keeps to check its key again on every request without
// holding the key itself.
func Fingerprint(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// ByFingerprint is Authenticate by the key's Fingerprint. A key whose row
// was deleted (revoked), or a bootstrap key no longer configured, returns
// ErrUnauthenticated.
func (s *Store) ByFingerprint(ctx context.Context, sum []byte) (Key, error) {
	if len(sum) != sha256.Size {
		return Key{}, ErrUnauthenticated
	}
	if s.bootstrapHash != nil && subtle.ConstantTimeCompare(sum, s.bootstrapHash) == 1 {
		return Key{ID: BootstrapKeyID, Role: Admin}, nil
	}
	var (
		k          Key
		id         uuid.UUID
		stored     []byte
		customerID *string
	)
	err := s.pool.QueryRow(ctx, `SELECT id, key_hash, role, customer_id FROM api_keys WHERE key_hash = $1`, sum).
		Scan(&id, &stored, &k.Role, &customerID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrUnauthenticated
	}
	if err != nil {
		return Key{}, fmt.Errorf("look up API key: %w", err)
	}
	if subtle.ConstantTimeCompare(sum, stored) != 1 {
		return Key{}, ErrUnauthenticated
	}
	k.ID = id.String()
	if customerID != nil {
		k.CustomerID = *customerID
	}
	return k, nil
}

// Validate checks a key to create: a known role, and a customer id for
// the customer role only. Returns the role, or rebilltype.Errors.
func Validate(role, customerID string) (Role, error) {
	var errs rebilltype.Errors
	r, err := ParseRole(role)
	if err != nil {
		errs.Add("role", "must be one of admin, support, customer")
	}
	switch {
	case r == Customer && !rebilltype.ValidCustomerID(customerID):
		errs.Add("customer_id", "is required for the customer role: 1..%d printable ASCII characters, not only spaces", rebilltype.MaxCustomerID)
	case r != Customer && customerID != "":
		errs.Add("customer_id", "is only allowed for the customer role")
	}
	return r, errs.Err()
}

// Create issues a key and stores its hash in tx. Returns rebilltype.Errors
// for a bad role or customer id.
func (s *Store) Create(ctx context.Context, tx pgx.Tx, role, customerID string) (Created, error) {
	return create(ctx, tx, role, customerID)
}

// CreateWithPool is Create in a transaction of its own (the CLI).
func (s *Store) CreateWithPool(ctx context.Context, role, customerID string) (key Created, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		key, err = create(ctx, tx, role, customerID)
		return err
	})
	return key, err
}

func create(ctx context.Context, tx pgx.Tx, roleName, customerID string) (Created, error) {
	role, err := Validate(roleName, customerID)
	if err != nil {
		return Created{}, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return Created{}, fmt.Errorf("generate key: %w", err)
	}
	secret := keyPrefix + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	id, err := uuid.NewV7()
	if err != nil {
		return Created{}, fmt.Errorf("new key id: %w", err)
	}
	var cust *string
	if customerID != "" {
		cust = &customerID
	}
	if _, err := tx.Exec(ctx, `INSERT INTO api_keys (id, key_hash, role, customer_id) VALUES ($1, $2, $3, $4)`,
		id, sum[:], role, cust); err != nil {
		return Created{}, fmt.Errorf("store API key: %w", err)
	}
	return Created{Key: Key{ID: id.String(), Role: role, CustomerID: customerID}, Secret: secret}, nil
}

// EnsureFirstAdmin creates an admin key when the database has none, so
// that a fresh install can be used without configuration. created is false
// when an admin key already existed; concurrent nodes create at most one.
func (s *Store) EnsureFirstAdmin(ctx context.Context) (key Created, created bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('rebill-first-admin-key'))`); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE role = $1)`, Admin).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		key, err = create(ctx, tx, string(Admin), "")
		created = err == nil
		return err
	})
	if err != nil {
		return Created{}, false, fmt.Errorf("ensure first admin key: %w", err)
	}
	return key, created, nil
}
