// Package notify publishes what happens to subscriptions and charges: an
// event log written in the transaction of each change, webhook endpoints
// with signed deliveries (River jobs on their own queue), and customer
// notices (a card about to expire, an upcoming renewal).
//
// The domain packages do not import notify: subscriptions.Store and the
// charges package call an EventSink, which Recorder implements and wiring
// installs. Every transition ends in the one place that calls the sink
// (subscriptions' transition seam, charges' guarded move and bulk moves),
// so a new transition cannot forget its event.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/apiobjects"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/subscriptions"
)

// Event types. Subscription and charge types are "subscription." or
// "charge." followed by the domain's event name.
const (
	TypeChargeUpcoming        = "charge.upcoming"
	TypePaymentMethodExpiring = "payment_method.expiring"
	TypeTrialWillEnd          = "subscription.trial_will_end"
	subscriptionPrefix        = "subscription."
	chargePrefix              = "charge."
	refundPrefix              = "refund."
	idPrefix                  = "evt_"
)

// Types are the event types an endpoint may subscribe to.
var Types = []string{
	"subscription.created", "subscription.paused", "subscription.resumed", "subscription.reactivated",
	"subscription.cancel_scheduled", "subscription.cancelled", "subscription.past_due", "subscription.unpaid",
	"subscription.payment_method_updated",
	"subscription.updated", "subscription.update_scheduled", "subscription.update_removed",
	"subscription.trial_ended", TypeTrialWillEnd,
	"charge.succeeded", "charge.declined", "charge.failed", "charge.requires_review", "charge.resolved", "charge.voided",
	TypeChargeUpcoming, TypePaymentMethodExpiring,
	"enrollment.created", "enrollment.paused", "enrollment.resumed", "enrollment.cancelled",
	"enrollment.payment_method_updated",
	"bill.received", "bill.awaiting_confirmation", "bill.awaiting_registry", "bill.paid", "bill.failed", "bill.withdrawn", "bill.expired",
	"bill.duplicate", "bill.paid_elsewhere",
	"charge.refunded", "refund.created", "refund.succeeded", "refund.failed",
}

// KnownType reports whether t is one of Types.
func KnownType(t string) bool {
	for _, k := range Types {
		if k == t {
			return true
		}
	}
	return false
}

// ErrNotFound: no such event (or not the caller's).
var ErrNotFound = fault.New(fault.NotFound, "event not found")

// Event is one row of the log.
type Event struct {
	// ID is the row's UUIDv7, in creation order; Public, when not nil, is
	// the id the API and webhooks show (see Recorder.Record).
	ID         uuid.UUID
	Public     uuid.UUID
	Type       string
	ObjectID   uuid.UUID
	ParentID   *uuid.UUID
	CustomerID string
	CreatedAt  time.Time
	Object     json.RawMessage // as the object's GET returned it
}

// PublicID is the event's id as the API and webhooks show it: the one
// derived from its fact, or the row's id for an event written before
// events had one.
func (e Event) PublicID() string { return FormatID(e.PublicUUID()) }

// PublicUUID is the uuid of PublicID.
func (e Event) PublicUUID() uuid.UUID {
	if e.Public != uuid.Nil {
		return e.Public
	}
	return e.ID
}

// FormatID is evt_<uuid>.
func FormatID(id uuid.UUID) string { return idPrefix + id.String() }

// ParseID reads evt_<uuid>.
func ParseID(s string) (uuid.UUID, bool) {
	rest, ok := strings.CutPrefix(s, idPrefix)
	if !ok {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(rest)
	return id, err == nil && len(rest) == 36
}

// Body is the event as GET /v1/events/{id} returns it and as a webhook
// delivers it.
type Body struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      BodyData  `json:"data"`
}

// BodyData holds the object.
type BodyData struct {
	Object json.RawMessage `json:"object"`
}

// Body is e's public shape.
func (e Event) Body() Body {
	return Body{ID: e.PublicID(), Type: e.Type, CreatedAt: e.CreatedAt.UTC(), Data: BodyData{Object: e.Object}}
}

// Recorder writes events and fans them out to webhook endpoints. It
// implements subscriptions.EventSink and charges.EventSink.
type Recorder struct {
	// Enqueue inserts delivery jobs in the event's transaction; nil
	// records events without deliveries (package tests).
	Enqueue Enqueuer
}

// SubscriptionChanged records subscription.<eventType>.
func (r *Recorder) SubscriptionChanged(ctx context.Context, tx pgx.Tx, eventType string, sub subscriptions.Subscription, at time.Time) error {
	_, err := r.Record(ctx, tx, subscriptionPrefix+eventType, sub.ID, nil, sub.CustomerID, apiobjects.FromSubscription(sub), at, "")
	return err
}

// SubscriptionStored restates sub in the events tx wrote of it.
func (r *Recorder) SubscriptionStored(ctx context.Context, tx pgx.Tx, sub subscriptions.Subscription) error {
	return r.Restate(ctx, tx, sub.ID, apiobjects.FromSubscription(sub))
}

// ChargeChanged records charge.<eventType>; its parent is the charge's
// subscription or enrollment. Its fact is the charge's key and attempt,
// not its id: a charge a restore forgot is made again under a new id and
// the same key.
func (r *Recorder) ChargeChanged(ctx context.Context, tx pgx.Tx, eventType string, c charges.Charge, at time.Time) error {
	parent := c.OwnerID()
	fact := fmt.Sprintf("%s:a%d", c.Key(), c.AttemptCount)
	_, err := r.record(ctx, tx, chargePrefix+eventType, fact, c.ID, &parent, c.CustomerID, apiobjects.FromCharge(c), at, "")
	return err
}

// RefundChanged records a refund's event (refund.created, .succeeded,
// .failed), its parent the refunded charge. Its fact is the refund's
// gateway key (its charge's key and its number), not its id.
func (r *Recorder) RefundChanged(ctx context.Context, tx pgx.Tx, eventType string, rf charges.Refund, at time.Time) error {
	parent := rf.ChargeID
	_, err := r.record(ctx, tx, refundPrefix+eventType, rf.GatewayKey, rf.ID, &parent, rf.CustomerID, apiobjects.FromRefund(rf),
		at, "")
	return err
}

// Record appends an event with object encoded as its data.object and
// queues its deliveries, all in tx. A non-empty noticeKey makes the event
// happen once: a second event with the same key is not written (recorded
// false). The event's fact is its notice key, else its object's id.
func (r *Recorder) Record(ctx context.Context, tx pgx.Tx, typ string, objectID uuid.UUID, parentID *uuid.UUID,
	customerID string, object any, at time.Time, noticeKey string) (recorded bool, err error) {
	fact := noticeKey
	if fact == "" {
		fact = objectID.String()
	}
	return r.record(ctx, tx, typ, fact, objectID, parentID, customerID, object, at, noticeKey)
}

// publicIDSQL derives an event's public id in SQL from $2 (its type), $9
// (its fact) and n (how many events of that type about that fact are
// kept): a UUIDv8 (RFC 9562) of the first 16 bytes of a SHA-256 of the
// three. Derived from what the event says, not from when it was written,
// so that the same fact published again after a database restore forgot
// the first (the restored charge captured under the key the gateway
// answered before, the subscription created again under its key) carries
// the id the receivers already saw, and they drop it as a repeat; the
// count tells apart a later event of the same type about the same fact (a
// subscription paused twice).
const publicIDSQL = `(SELECT substr(encode(set_byte(set_byte(h, 6, (get_byte(h, 6) & 15) | 128), 8, (get_byte(h, 8) & 63) | 128),
		'hex'), 1, 32)::uuid
	FROM (SELECT sha256(convert_to($2 || chr(1) || $9 || chr(1) ||
		(SELECT count(*) FROM events WHERE fact = $9 AND type = $2)::text, 'UTF8')) AS h) AS digest)`

// record is Record under a fact of the caller's.
func (r *Recorder) record(ctx context.Context, tx pgx.Tx, typ, fact string, objectID uuid.UUID, parentID *uuid.UUID,
	customerID string, object any, at time.Time, noticeKey string) (recorded bool, err error) {
	data, err := json.Marshal(object)
	if err != nil {
		return false, fmt.Errorf("encode %s object: %w", typ, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return false, fmt.Errorf("new event id: %w", err)
	}
	var key *string
	if noticeKey != "" {
		key = &noticeKey
	}
	// The event, the object restated in the events this transaction wrote
	// of it before (see Restate), and the endpoints to deliver the event
	// to, in one round trip. The endpoints are read in the statement's
	// snapshot, as a statement of their own right after the insert would
	// read them.
	var endpoints []uuid.UUID
	err = tx.QueryRow(ctx, `WITH earlier AS (
			UPDATE events SET data = $7 WHERE object_id = $3 AND `+writtenByThisTransaction+`
		), e AS (
			INSERT INTO events (id, public_id, fact, type, object_id, parent_id, customer_id, created_at, data, notice_key)
			VALUES ($1, `+publicIDSQL+`, $9, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING id
		)
		SELECT `+endpointsSQL+` FROM e`,
		id, typ, objectID, parentID, customerID, at.UTC(), string(data), key, fact).Scan(&endpoints)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // the event is there already, under its public id or its notice key
	}
	if err != nil {
		return false, fmt.Errorf("insert %s event: %w", typ, err)
	}
	if err := fanOut(ctx, tx, r.Enqueue, id, typ, endpoints); err != nil {
		return false, err
	}
	return true, nil
}

// writtenByThisTransaction holds for the events rows the current
// transaction inserted: their xmin is its id (the low 32 bits of the
// 64-bit one). rebill writes events without savepoints, whose rows would
// carry a subtransaction's id instead.
const writtenByThisTransaction = `xmin::text::bigint = pg_current_xact_id_if_assigned()::text::bigint % 4294967296`

// Restate makes the events of objectID that tx wrote show object, the
// object as tx leaves it. An event's data.object is the object as its GET
// returns it once the change commits (what the request that caused it
// answered), and a transaction may change the object again after its
// event: a resume bills the period it begins, a pushed bill is charged at
// once, a second transition follows the first. Record restates the
// earlier events of its object itself; the stores call Restate, through
// their sinks, for a change that publishes no event of its own.
func (r *Recorder) Restate(ctx context.Context, tx pgx.Tx, objectID uuid.UUID, object any) error {
	data, err := json.Marshal(object)
	if err != nil {
		return fmt.Errorf("encode object %s: %w", objectID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE events SET data = $2 WHERE object_id = $1 AND `+writtenByThisTransaction,
		objectID, string(data)); err != nil {
		return fmt.Errorf("restate the events of %s: %w", objectID, err)
	}
	return nil
}

const eventColumns = `id, coalesce(public_id, '00000000-0000-0000-0000-000000000000'), type, object_id, parent_id,
	customer_id, created_at, data::text`

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	var data string
	err := row.Scan(&e.ID, &e.Public, &e.Type, &e.ObjectID, &e.ParentID, &e.CustomerID, &e.CreatedAt, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("scan event: %w", err)
	}
	e.CreatedAt = e.CreatedAt.UTC()
	e.Object = json.RawMessage(data)
	return e, nil
}

// byPublicID matches the event whose public id is $1: its derived one, or
// its row id when it has none.
const byPublicID = `(public_id = $1 OR (public_id IS NULL AND id = $1))`

// GetEvent returns the event whose public id is id; a non-empty
// customerID must own it (ErrNotFound otherwise).
func GetEvent(ctx context.Context, db pg.DBTX, id uuid.UUID, customerID string) (Event, error) {
	return scanEvent(db.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE `+byPublicID+` AND ($2 = '' OR customer_id = $2)`,
		id, customerID))
}

// eventByRowID returns the event whose row id is id (a delivery job's).
func eventByRowID(ctx context.Context, db pg.DBTX, id uuid.UUID) (Event, error) {
	return scanEvent(db.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1`, id))
}

// ListParams filters and pages the log. Empty filters match everything;
// ObjectID matches an event's object or its parent; Before is the keyset
// cursor (the last id of the previous page).
type ListParams struct {
	Type       string
	ObjectID   uuid.UUID
	CustomerID string
	Before     uuid.UUID
	Limit      int
}

// ListEvents returns events newest first.
func ListEvents(ctx context.Context, db pg.DBTX, p ListParams) ([]Event, error) {
	var object, before *uuid.UUID
	if p.ObjectID != uuid.Nil {
		object = &p.ObjectID
	}
	if p.Before != uuid.Nil {
		before = &p.Before
	}
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE ($1 = '' OR type = $1) AND ($2::uuid IS NULL OR object_id = $2 OR parent_id = $2)
		  AND ($3 = '' OR customer_id = $3)
		  AND ($4::uuid IS NULL OR id < (SELECT id FROM events WHERE public_id = $4 OR (public_id IS NULL AND id = $4)))
		ORDER BY id DESC LIMIT $5`, p.Type, object, p.CustomerID, before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return events, nil
}
