package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/platform/clock"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions/period"
)

// Store reads and writes subscriptions. Mutations take a pgx.Tx so that the
// row, its event and any job they cause commit together.
type Store struct {
	clock  clock.Clock
	events EventSink
}

// NewStore returns a store that stamps changes with clk's time.
func NewStore(clk clock.Clock) *Store { return &Store{clock: clk} }

// EventSink receives every change of a subscription, in the transaction
// that makes it, with the subscription as it is after the change and the
// event type (EventPaused...). notify implements it (the published event
// log and its webhooks); an error rolls the change back.
//
// SubscriptionStored receives a change that publishes no event of its own
// (a period billed after a resume), so that the events the transaction
// wrote of the subscription show it as the transaction leaves it.
type EventSink interface {
	SubscriptionChanged(ctx context.Context, tx pgx.Tx, eventType string, sub Subscription, at time.Time) error
	SubscriptionStored(ctx context.Context, tx pgx.Tx, sub Subscription) error
}

// SetEventSink makes the store publish its changes to sink. Wiring calls
// it before the store is used; without it only the subscription's own log
// (subscription_events) is written.
func (st *Store) SetEventSink(sink EventSink) { st.events = sink }

// changed appends the subscription's log entry and publishes the change:
// the one place every transition ends, so none can forget its event.
func (st *Store) changed(ctx context.Context, tx pgx.Tx, sub Subscription, typ string, from, to Status, actor Actor, at time.Time) error {
	if err := st.appendEvent(ctx, tx, sub.ID, typ, from, to, actor, at); err != nil {
		return err
	}
	return st.publish(ctx, tx, sub, typ, at)
}

func (st *Store) publish(ctx context.Context, tx pgx.Tx, sub Subscription, typ string, at time.Time) error {
	if st.events == nil {
		return nil
	}
	if err := st.events.SubscriptionChanged(ctx, tx, typ, sub, at); err != nil {
		return fmt.Errorf("publish %s event: %w", typ, err)
	}
	return nil
}

// Stored tells the sink that sub, as tx now holds it, was written without
// an event of its own: the events tx wrote of it earlier are restated.
func (st *Store) Stored(ctx context.Context, tx pgx.Tx, sub Subscription) error {
	if st.events == nil {
		return nil
	}
	if err := st.events.SubscriptionStored(ctx, tx, sub); err != nil {
		return fmt.Errorf("restate subscription %s: %w", sub.ID, err)
	}
	return nil
}

// New is a validated request to create a subscription.
type New struct {
	CustomerID    string
	Amount        int64
	Currency      string
	Interval      period.Interval
	IntervalCount int
	TimeZone      string
	BillingAnchor *time.Time // nil: now
	PaymentMethod rebilltype.PaymentMethod
	Description   string
	Metadata      map[string]string
	Receipt       *Receipt // nil: the payments carry no fiscal receipt
	// TrialEnd, or TrialPeriodDays from the creation, starts the
	// subscription trialing: nothing is charged before the trial ends, and
	// its first period begins then (it is the billing anchor). At most one
	// is given, and never with BillingAnchor.
	TrialEnd        *time.Time
	TrialPeriodDays *int
	// ID, when not nil, is the id the subscription is created under: one
	// derived from the request (its client and Idempotency-Key), so that
	// the request run again after a database restore forgot it creates
	// the same subscription, whose charges then carry the gateway keys
	// the gateway already knows. Nil: a new random UUIDv7.
	ID uuid.UUID
}

// TrialEndAt is when the trial of a subscription created at now ends: its
// TrialEnd, or TrialPeriodDays calendar days after now in the
// subscription's time zone (the same wall-clock time, across a DST
// change). Nil without a trial.
func (n New) TrialEndAt(now time.Time) *time.Time {
	switch {
	case n.TrialEnd != nil:
		end := n.TrialEnd.UTC()
		return &end
	case n.TrialPeriodDays != nil:
		end := now.In(location(n.TimeZone)).AddDate(0, 0, *n.TrialPeriodDays).UTC()
		return &end
	}
	return nil
}

const columns = `id, customer_id, status, amount, currency, interval, interval_count, timezone,
	billing_anchor, next_period_index, next_charge_at, cancel_at_period_end, paused_at, resume_at,
	pm_gateway, pm_token, coalesce(pm_brand, ''), coalesce(pm_last4, ''), pm_exp_month, pm_exp_year,
	coalesce(description, ''), metadata, created_at, updated_at, cancelled_at, unpaid_since, receipt, experiments,
	trial_end, pending_update, credit_balance, period_key_suffix, on_resume, paused_time_left_us, paused_period_end`

func scan(row pgx.Row) (Subscription, error) {
	var s Subscription
	var meta, receipt, pending []byte
	var leftUS *int64
	err := row.Scan(&s.ID, &s.CustomerID, &s.Status, &s.Amount, &s.Currency, &s.Interval, &s.IntervalCount, &s.TimeZone,
		&s.BillingAnchor, &s.NextPeriodIndex, &s.NextChargeAt, &s.CancelAtPeriodEnd, &s.PausedAt, &s.ResumeAt,
		&s.PaymentMethod.Gateway, &s.PaymentMethod.Token, &s.PaymentMethod.Brand, &s.PaymentMethod.Last4,
		&s.PaymentMethod.ExpMonth, &s.PaymentMethod.ExpYear,
		&s.Description, &meta, &s.CreatedAt, &s.UpdatedAt, &s.CancelledAt, &s.UnpaidSince, &receipt, &s.Experiments,
		&s.TrialEnd, &pending, &s.CreditBalance, &s.PeriodKeySuffix, &s.OnResume, &leftUS, &s.pausedPeriodEnd)
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscription{}, ErrNotFound
	}
	if err != nil {
		return Subscription{}, fmt.Errorf("scan subscription: %w", err)
	}
	if err := json.Unmarshal(meta, &s.Metadata); err != nil {
		return Subscription{}, fmt.Errorf("decode subscription metadata: %w", err)
	}
	if receipt != nil {
		s.Receipt = &Receipt{}
		if err := json.Unmarshal(receipt, s.Receipt); err != nil {
			return Subscription{}, fmt.Errorf("decode subscription receipt: %w", err)
		}
	}
	if pending != nil {
		s.PendingUpdate = &PendingUpdate{}
		if err := json.Unmarshal(pending, s.PendingUpdate); err != nil {
			return Subscription{}, fmt.Errorf("decode pending update: %w", err)
		}
	}
	if leftUS != nil {
		left := time.Duration(*leftUS) * time.Microsecond
		s.PausedTimeLeft = &left
	}
	if s.TrialEnd != nil {
		end := s.TrialEnd.UTC()
		s.TrialEnd = &end
	}
	s.BillingAnchor = s.BillingAnchor.UTC()
	s.NextChargeAt = s.NextChargeAt.UTC()
	s.CreatedAt = s.CreatedAt.UTC()
	s.UpdatedAt = s.UpdatedAt.UTC()
	return s, nil
}

// FirstBilling bills a subscription as it is created. Given the
// subscription about to be inserted, it returns how far the periods due at
// once bill it (nil when none is due) and how their writes are sent (nil:
// none to send).
type FirstBilling func(sub Subscription) (*Advance, SendWith, error)

// SendWith sends batch, which holds the subscription's insert, with the
// writes of its periods after it in the same round trip, and the writes
// that follow them in tx. It returns the error of any statement on batch.
type SendWith func(ctx context.Context, tx pgx.Tx, batch *pgx.Batch) error

// Create inserts an active subscription whose first period starts at the
// billing anchor (a trialing one, whose anchor is its trial's end), logs
// its creation and publishes it. bill, when not nil,
// bills the periods due at once: the row is inserted already advanced past
// them and bill's writes follow it in the same round trip. An insert and a
// later advance would write the row twice, and that second write is never
// a HOT update (next_charge_at is indexed). Returns ErrCreatedBefore when
// n.ID is already a subscription's.
func (st *Store) Create(ctx context.Context, tx pgx.Tx, n New, actor Actor, bill FirstBilling) (Subscription, error) {
	now := st.clock.Now()
	status, anchor := Active, now
	if n.BillingAnchor != nil {
		anchor = n.BillingAnchor.UTC()
	}
	trialEnd := n.TrialEndAt(now)
	if trialEnd != nil {
		*trialEnd = trialEnd.Truncate(time.Microsecond)
		status, anchor = Trialing, *trialEnd
	}
	id := n.ID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return Subscription{}, fmt.Errorf("new subscription id: %w", err)
		}
	}
	meta := n.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return Subscription{}, fmt.Errorf("encode metadata: %w", err)
	}
	var receiptJSON []byte // NULL without a receipt
	if n.Receipt != nil {
		if receiptJSON, err = json.Marshal(n.Receipt); err != nil {
			return Subscription{}, fmt.Errorf("encode receipt: %w", err)
		}
	}
	// The row as it will be stored (timestamps keep microseconds), for
	// bill to compute its periods from before it exists.
	draft := Subscription{ID: id, CustomerID: n.CustomerID, Status: status, Amount: n.Amount, Currency: n.Currency,
		Interval: n.Interval, IntervalCount: n.IntervalCount, TimeZone: n.TimeZone,
		BillingAnchor: anchor.Truncate(time.Microsecond), NextChargeAt: anchor.Truncate(time.Microsecond),
		PaymentMethod: n.PaymentMethod, Description: n.Description, Metadata: meta, CreatedAt: now, UpdatedAt: now,
		Receipt: n.Receipt, TrialEnd: trialEnd}
	send := func(ctx context.Context, tx pgx.Tx, batch *pgx.Batch) error { return tx.SendBatch(ctx, batch).Close() }
	if bill != nil {
		adv, with, err := bill(draft)
		if err != nil {
			return Subscription{}, err
		}
		if adv != nil {
			draft.NextPeriodIndex, draft.NextChargeAt, draft.Experiments = adv.NextPeriodIndex, adv.NextChargeAt, adv.Experiments
		}
		if with != nil {
			send = with
		}
	}
	// The row and its "created" event in one statement, bill's writes
	// after it in the same round trip.
	var sub Subscription
	batch := &pgx.Batch{}
	batch.Queue(`WITH s AS (
			INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval, interval_count,
				timezone, billing_anchor, next_period_index, next_charge_at, pm_gateway, pm_token, pm_brand, pm_last4,
				pm_exp_month, pm_exp_year, description, metadata, created_at, updated_at, receipt, experiments, trial_end)
			VALUES ($1, $2, $25, $3, $4, $5, $6, $7, $8, $22, $23, $9, $10, nullif($11, ''), nullif($12, ''), $13, $14,
				nullif($15, ''), $16, $17, $17, $21, $24, $26)
			RETURNING *
		), e AS (
			INSERT INTO subscription_events (subscription_id, type, from_status, to_status, actor_id, actor_role, at)
			SELECT id, $18, NULL, status, $19, $20, $17 FROM s
		)
		SELECT `+columns+` FROM s`,
		id, n.CustomerID, n.Amount, n.Currency, n.Interval, n.IntervalCount, n.TimeZone, draft.BillingAnchor,
		n.PaymentMethod.Gateway, n.PaymentMethod.Token, n.PaymentMethod.Brand, n.PaymentMethod.Last4,
		n.PaymentMethod.ExpMonth, n.PaymentMethod.ExpYear, n.Description, metaJSON, now,
		EventCreated, actor.ID, actor.Role, receiptJSON, draft.NextPeriodIndex, draft.NextChargeAt, recordJSON(draft.Experiments),
		status, trialEnd,
	).QueryRow(func(row pgx.Row) error {
		sub, err = scan(row)
		return err
	})
	if err := send(ctx, tx, batch); err != nil {
		if pg.UniqueViolation(err, "subscriptions_pkey") {
			return Subscription{}, fmt.Errorf("%w: subscription %s", ErrCreatedBefore, id)
		}
		return Subscription{}, fmt.Errorf("insert subscription: %w", err)
	}
	if err := st.publish(ctx, tx, sub, EventCreated, now); err != nil {
		return Subscription{}, err
	}
	return sub, nil
}

// Get returns one subscription. Returns ErrNotFound if it does not exist.
func (st *Store) Get(ctx context.Context, db pg.DBTX, id uuid.UUID) (Subscription, error) {
	return scan(db.QueryRow(ctx, `SELECT `+columns+` FROM subscriptions WHERE id = $1`, id))
}

// GetForUpdate returns one subscription and locks its row until tx ends, so
// that concurrent changes to it serialise. Returns ErrNotFound.
func (st *Store) GetForUpdate(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Subscription, error) {
	return scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM subscriptions WHERE id = $1 FOR UPDATE`, id))
}

// GetManyForUpdate returns the subscriptions of ids and locks their rows
// until tx ends, in the order of their ids: two transactions locking
// overlapping sets wait for each other and never deadlock.
func (st *Store) GetManyForUpdate(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) ([]Subscription, error) {
	return collect(tx.Query(ctx, `SELECT `+columns+` FROM subscriptions WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids))
}

// ListParams filters and pages a list. Empty filters match everything;
// Before is the keyset cursor (the last id of the previous page).
type ListParams struct {
	CustomerID string
	Status     Status
	Before     uuid.UUID
	Limit      int
}

// List returns subscriptions newest first: by creation time, then id, the
// keyset the cursor (the last id listed) continues. Not by id alone: an
// id derived from a request's Idempotency-Key is not in creation order.
func (st *Store) List(ctx context.Context, db pg.DBTX, p ListParams) ([]Subscription, error) {
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM subscriptions
		WHERE ($1 = '' OR customer_id = $1) AND ($2 = '' OR status = $2)
		  AND ($3::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM subscriptions WHERE id = $3))
		ORDER BY created_at DESC, id DESC LIMIT $4`,
		p.CustomerID, string(p.Status), nullUUID(p.Before), p.Limit)
	return collect(rows, err)
}

func collect(rows pgx.Rows, err error) ([]Subscription, error) {
	if err != nil {
		return nil, fmt.Errorf("query subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Subscription, error) { return scan(row) })
	if err != nil {
		return nil, fmt.Errorf("query subscriptions: %w", err)
	}
	return subs, nil
}

func nullUUID(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

// Events returns a subscription's log oldest first, after the event id
// after (0 for the start).
func (st *Store) Events(ctx context.Context, db pg.DBTX, id uuid.UUID, after int64, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, `SELECT id, subscription_id, type, from_status, to_status, actor_id, actor_role, at
		FROM subscription_events WHERE subscription_id = $1 AND id > $2 ORDER BY id LIMIT $3`, id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		var from *string
		if err := row.Scan(&e.ID, &e.SubscriptionID, &e.Type, &from, &e.To, &e.Actor.ID, &e.Actor.Role, &e.At); err != nil {
			return Event{}, fmt.Errorf("scan event: %w", err)
		}
		if from != nil {
			e.From = Status(*from)
		}
		e.At = e.At.UTC()
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return events, nil
}

func (st *Store) appendEvent(ctx context.Context, tx pgx.Tx, id uuid.UUID, typ string, from, to Status, actor Actor, at time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO subscription_events (subscription_id, type, from_status, to_status, actor_id, actor_role, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, id, typ, from, to, actor.ID, actor.Role, at)
	if err != nil {
		return fmt.Errorf("append %s event: %w", typ, err)
	}
	return nil
}

// Billing are the statuses of a subscription whose periods are charged
// (active, past due): the predicate of the partial index
// subscriptions_due_idx.
var Billing = []Status{Active, PastDue}

// billingSQL is Billing as a condition, written out from the constants so
// that the planner matches it against the index's predicate.
var billingSQL = "status IN (" + fsm.Quoted(Billing...) + ")"

// Noticed is a renewal whose charge.upcoming notice was published: the
// subscription and the next_charge_at the notice announced.
type Noticed struct {
	ID     uuid.UUID
	Charge time.Time
}

// NoticeLead is the charge.upcoming lead of the subscriptions recorded in
// arm Arm of the running experiment Key.
type NoticeLead struct {
	Key, Arm string
	Lead     time.Duration
}

// RenewalsToNotice returns up to limit renewals, soonest first, whose
// charge.upcoming notice is due at now and not yet marked: the next charge
// is ahead and within its lead (the lead of the subscription's arm among
// arms, lead otherwise). The partial index subscriptions_upcoming_idx
// holds only the renewals not yet marked, so the read costs the notices
// due, not every renewal within the lead.
func (st *Store) RenewalsToNotice(ctx context.Context, tx pgx.Tx, now time.Time, lead time.Duration, arms []NoticeLead, limit int) ([]Noticed, error) {
	longest := lead
	keys, names, secs := make([]string, len(arms)), make([]string, len(arms)), make([]float64, len(arms))
	for i, a := range arms {
		keys[i], names[i], secs[i] = a.Key, a.Arm, a.Lead.Seconds()
		longest = max(longest, a.Lead)
	}
	rows, err := tx.Query(ctx, `SELECT id, next_charge_at FROM subscriptions s
		WHERE `+billingSQL+` AND NOT cancel_at_period_end AND next_period_index >= 1
		  AND upcoming_noticed_for IS DISTINCT FROM next_charge_at
		  AND next_charge_at > $1 AND next_charge_at <= $1 + make_interval(secs => $6)
		  AND next_charge_at <= $1 + make_interval(secs => coalesce(
			(SELECT a.secs FROM unnest($3::text[], $4::text[], $5::float8[]) AS a(k, arm, secs)
			 WHERE s.experiments->>a.k = a.arm LIMIT 1), $2))
		ORDER BY next_charge_at, id LIMIT $7`, now, lead.Seconds(), keys, names, secs, longest.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("renewals to notice: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Noticed, error) {
		var n Noticed
		return n, row.Scan(&n.ID, &n.Charge)
	})
	if err != nil {
		return nil, fmt.Errorf("renewals to notice: %w", err)
	}
	return due, nil
}

// MarkUpcomingNoticed records, in tx, that the renewals' notices are
// published, so that the notice scan no longer reads them. A subscription
// whose next charge moved since (charged, updated, resumed) is left
// alone: its new renewal is still owed its notice. Rows are locked in id
// order, the order every batch that locks several subscriptions takes.
func (st *Store) MarkUpcomingNoticed(ctx context.Context, tx pgx.Tx, noticed []Noticed) error {
	if len(noticed) == 0 {
		return nil
	}
	ids, at := make([]uuid.UUID, len(noticed)), make([]time.Time, len(noticed))
	for i, n := range noticed {
		ids[i], at[i] = n.ID, n.Charge
	}
	_, err := tx.Exec(ctx, `WITH locked AS (
			SELECT s.id FROM subscriptions s JOIN unnest($1::uuid[], $2::timestamptz[]) AS n(id, at)
				ON s.id = n.id AND s.next_charge_at = n.at
			ORDER BY s.id FOR NO KEY UPDATE OF s
		)
		UPDATE subscriptions s SET upcoming_noticed_for = s.next_charge_at FROM locked WHERE s.id = locked.id`, ids, at)
	if err != nil {
		return fmt.Errorf("mark %d renewals noticed: %w", len(noticed), err)
	}
	return nil
}

// LockDue claims up to limit subscriptions whose next charge is due at now,
// in keyset order after (afterAt, afterID), skipping rows that another
// scan or request holds: each is billed by whoever holds it.
func (st *Store) LockDue(ctx context.Context, tx pgx.Tx, now, afterAt time.Time, afterID uuid.UUID, limit int) ([]Subscription, error) {
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM subscriptions
		WHERE `+billingSQL+` AND next_charge_at <= $1
		  AND (next_charge_at, id) > ($2, $3)
		ORDER BY next_charge_at, id LIMIT $4 FOR UPDATE SKIP LOCKED`, now, afterAt, afterID, limit)
	return collect(rows, err)
}

// LockScheduledCancels claims up to limit paused or unpaid subscriptions
// whose cancel scheduled at period end has come (the period ended while
// they were not billed, so no due-period scan carries the cancel out),
// skipping rows another scan or request holds. A pause that continues its
// period (paused_time_left_us set) is not among them: its period ends
// after the resume, where the due-period scan carries the cancel out.
func (st *Store) LockScheduledCancels(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Subscription, error) {
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM subscriptions
		WHERE status IN (`+fsm.Quoted(Paused, Unpaid)+`) AND cancel_at_period_end AND next_charge_at <= $1
		  AND paused_time_left_us IS NULL
		ORDER BY next_charge_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
	return collect(rows, err)
}

// LockResumes claims up to limit paused subscriptions whose resume_at has
// come, skipping rows another scan or request holds.
func (st *Store) LockResumes(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Subscription, error) {
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM subscriptions
		WHERE status = `+fsm.Quoted(Paused)+` AND resume_at <= $1 ORDER BY resume_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
	return collect(rows, err)
}

// LockTrialsEnded claims up to limit trialing subscriptions whose trial
// has ended by now, oldest trial end first, skipping rows another scan or
// request holds: each trial is ended by whoever holds it.
func (st *Store) LockTrialsEnded(ctx context.Context, tx pgx.Tx, now time.Time, limit int) ([]Subscription, error) {
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM subscriptions
		WHERE status = `+fsm.Quoted(Trialing)+` AND trial_end <= $1 ORDER BY trial_end, id LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
	return collect(rows, err)
}

// Advance moves a subscription's next period past the ones just charged.
type Advance struct {
	ID              uuid.UUID
	NextPeriodIndex int
	NextChargeAt    time.Time
	// Experiments is the subscription's record of experiment arms after
	// the advance; arms it already had are kept whatever this says.
	Experiments map[string]string
}

// AdvanceAll applies advances in one statement, in the transaction that
// created the periods' charges (the rows are locked by the caller). A
// subscription already further along is left alone.
func (st *Store) AdvanceAll(ctx context.Context, tx pgx.Tx, advances []Advance, now time.Time) error {
	if len(advances) == 0 {
		return nil
	}
	ids := make([][16]byte, len(advances)) // binary uuid[]: no text round trip
	indexes := make([]int32, len(advances))
	ats := make([]time.Time, len(advances))
	records := make([]string, len(advances))
	for i, a := range advances {
		ids[i], indexes[i], ats[i], records[i] = a.ID, int32(a.NextPeriodIndex), a.NextChargeAt, recordJSON(a.Experiments)
	}
	// A recorded arm is never replaced: the stored record is the right
	// operand of ||, whose keys win.
	_, err := tx.Exec(ctx, `UPDATE subscriptions s SET next_period_index = u.idx, next_charge_at = u.at, updated_at = $4,
			experiments = u.exps::jsonb || s.experiments
		FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $5::text[]) AS u(id, idx, at, exps)
		WHERE s.id = u.id AND s.next_period_index < u.idx`, ids, indexes, ats, now, records)
	if err != nil {
		return fmt.Errorf("advance subscriptions: %w", err)
	}
	return nil
}

// recordJSON is an experiment record as the jsonb column stores it.
func recordJSON(rec map[string]string) string {
	if len(rec) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(rec) // a map of strings always encodes
	return string(b)
}
