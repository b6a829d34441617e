package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/rebilltype"
)

// Endpoint statuses.
const (
	Enabled  = "enabled"
	Disabled = "disabled"
)

// Errors of the webhook use cases.
var (
	ErrEndpointNotFound = fault.New(fault.NotFound, "webhook endpoint not found")
	// ErrEndpointDisabled: a redelivery to a disabled endpoint.
	ErrEndpointDisabled = fault.New(fault.Conflict, "the webhook endpoint is disabled: enable it first")
)

// Endpoint is a webhook endpoint, without its secret.
type Endpoint struct {
	ID          uuid.UUID
	URL         string
	Events      []string
	Description string
	Status      string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// PreviousSecretExpiresAt is when the secret replaced by the last roll
	// stops signing deliveries; nil when there is none.
	PreviousSecretExpiresAt *time.Time
}

// Attempt is one delivery attempt of an event to an endpoint.
type Attempt struct {
	ID            int64
	EventID       uuid.UUID
	Attempt       int
	Outcome       string // delivered, retrying, failed
	StatusCode    *int
	Error         string
	DurationMS    int64
	At            time.Time
	NextAttemptAt *time.Time
}

// Webhooks are the use cases of webhook endpoints: admin changes them,
// support and admin read them (the API checks roles).
type Webhooks struct {
	Pool    *pgxpool.Pool
	Keys    *secrets.Keyring
	Policy  URLPolicy
	Clock   clock.Clock
	Enqueue Enqueuer // redeliveries
}

const maxURL, maxDescription = 2048, 500

// Create validates and stores an endpoint, enabled, and returns it with
// its secret, which is stored only encrypted. Event types are stored once
// each, in the order first given. Returns rebilltype.Errors (the URL policy
// included).
func (w *Webhooks) Create(ctx context.Context, tx pgx.Tx, rawURL string, events []string, description string) (Endpoint, string, error) {
	var errs rebilltype.Errors
	switch {
	case rawURL == "" || len(rawURL) > maxURL:
		errs.Add("url", "is required: an absolute https URL of at most %d characters", maxURL)
	case !uriCharacters(rawURL):
		errs.Add("url", "has a character a URL cannot hold (a space, a control character, non-ASCII, one of <>\"{}|\\^`): percent-encode it")
	default:
		if err := w.Policy.Check(ctx, rawURL); err != nil {
			errs.Add("url", "%s", strings.TrimPrefix(err.Error(), ErrURLRefused.Error()+": "))
		}
	}
	if len(events) == 0 {
		errs.Add("events", `is required: event types, or ["*"] for all`)
	}
	seen := map[string]bool{}
	unique := make([]string, 0, len(events))
	for i, e := range events {
		if seen[e] {
			continue
		}
		if e != "*" && !KnownType(e) {
			errs.Add(fmt.Sprintf("events[%d]", i), "is not a known event type")
		}
		seen[e] = true
		unique = append(unique, e)
	}
	events = unique
	if seen["*"] && len(seen) > 1 {
		errs.Add("events", `"*" stands alone`)
	}
	if utf8.RuneCountInString(description) > maxDescription {
		errs.Add("description", "must be at most %d characters", maxDescription)
	}
	if err := errs.Err(); err != nil {
		return Endpoint{}, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("new endpoint id: %w", err)
	}
	secret := newSecret()
	now := w.Clock.Now().UTC()
	var desc *string
	if description != "" {
		desc = &description
	}
	ep, err := scanEndpoint(tx.QueryRow(ctx, `INSERT INTO webhook_endpoints (id, url, events, description, status, secret, created_at, updated_at)
		VALUES ($1, $2, $3, $4, 'enabled', $5, $6, $6) RETURNING `+endpointColumns,
		id, rawURL, events, desc, w.Keys.Encrypt([]byte(secret), id[:]), now))
	if err != nil {
		return Endpoint{}, "", err
	}
	return ep, secret, nil
}

const endpointColumns = `id, url, events, coalesce(description, ''), status, created_at, updated_at, previous_secret_expires_at`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.URL, &e.Events, &e.Description, &e.Status, &e.CreatedAt, &e.UpdatedAt, &e.PreviousSecretExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, ErrEndpointNotFound
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("scan webhook endpoint: %w", err)
	}
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	if e.PreviousSecretExpiresAt != nil {
		at := e.PreviousSecretExpiresAt.UTC()
		e.PreviousSecretExpiresAt = &at
	}
	return e, nil
}

// Endpoints lists endpoints newest first, before the keyset cursor.
func (w *Webhooks) Endpoints(ctx context.Context, before uuid.UUID, limit int) ([]Endpoint, error) {
	var cursor *uuid.UUID
	if before != uuid.Nil {
		cursor = &before
	}
	rows, err := w.Pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE ($1::uuid IS NULL OR id < $1) ORDER BY id DESC LIMIT $2`, cursor, limit)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	eps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Endpoint, error) { return scanEndpoint(row) })
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	return eps, nil
}

// Endpoint returns one endpoint, or ErrEndpointNotFound.
func (w *Webhooks) Endpoint(ctx context.Context, id uuid.UUID) (Endpoint, error) {
	return scanEndpoint(w.Pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1`, id))
}

// SetStatus enables or disables an endpoint; already being there changes
// nothing. A disabled endpoint gets no delivery of the events published
// meanwhile, and its queued deliveries are dropped when they come up.
func (w *Webhooks) SetStatus(ctx context.Context, tx pgx.Tx, id uuid.UUID, status string) (Endpoint, error) {
	return scanEndpoint(tx.QueryRow(ctx, `UPDATE webhook_endpoints
		SET updated_at = CASE WHEN status = $2 THEN updated_at ELSE $3 END, status = $2
		WHERE id = $1 RETURNING `+endpointColumns, id, status, w.Clock.Now().UTC()))
}

// Attempts lists an endpoint's delivery attempts newest first, before the
// keyset cursor (0 for the first page). Returns ErrEndpointNotFound.
func (w *Webhooks) Attempts(ctx context.Context, id uuid.UUID, before int64, limit int) ([]Attempt, error) {
	if _, err := w.Endpoint(ctx, id); err != nil {
		return nil, err
	}
	// An attempt names its event by the event's public id, the one the
	// delivery carried.
	rows, err := w.Pool.Query(ctx, `SELECT a.id, coalesce(e.public_id, a.event_id), a.attempt, a.outcome, a.status_code,
			coalesce(a.error, ''), a.duration_ms, a.at, a.next_attempt_at
		FROM webhook_attempts a LEFT JOIN events e ON e.id = a.event_id
		WHERE a.endpoint_id = $1 AND ($2 = 0 OR a.id < $2) ORDER BY a.id DESC LIMIT $3`, id, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	attempts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		if err := row.Scan(&a.ID, &a.EventID, &a.Attempt, &a.Outcome, &a.StatusCode, &a.Error, &a.DurationMS, &a.At,
			&a.NextAttemptAt); err != nil {
			return Attempt{}, fmt.Errorf("scan delivery: %w", err)
		}
		a.At = a.At.UTC()
		if a.NextAttemptAt != nil {
			next := a.NextAttemptAt.UTC()
			a.NextAttemptAt = &next
		}
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return attempts, nil
}

// Redeliver queues the event for the endpoint again, with the same event
// id, in tx. Returns ErrEndpointNotFound, ErrNotFound for an unknown
// event, or ErrEndpointDisabled.
func (w *Webhooks) Redeliver(ctx context.Context, tx pgx.Tx, id, eventID uuid.UUID) error {
	ep, err := scanEndpoint(tx.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1`, id))
	if err != nil {
		return err
	}
	e, err := GetEvent(ctx, tx, eventID, "")
	if err != nil {
		return err
	}
	if ep.Status != Enabled {
		return ErrEndpointDisabled
	}
	if _, err := w.Enqueue.InsertManyTx(ctx, tx, []river.InsertManyParams{{Args: DeliverArgs{EventID: e.ID, EndpointID: id}}}); err != nil {
		return fmt.Errorf("queue redelivery: %w", err)
	}
	return nil
}

// uriCharacters reports whether raw holds only the characters RFC 3986
// lets a URI carry as they are (unreserved, reserved and '%'): Go's parser
// takes a raw space or non-ASCII in a path, and the endpoint would then be
// called at a URL other than the one shown.
func uriCharacters(raw string) bool {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-._~:/?#[]@!$&'()*+,;=%", c) >= 0:
		default:
			return false
		}
	}
	return true
}
