package subscriptions

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/pg"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/subscriptions/proration"
)

// Effective is when an update applies.
type Effective string

const (
	// EffectiveNow applies the update at once, prorated by its Proration.
	EffectiveNow Effective = "now"
	// EffectivePeriodEnd makes the update the subscription's
	// PendingUpdate, applied exactly at the current period's end.
	EffectivePeriodEnd Effective = "period_end"
)

// Proration is what an immediate change does about the unused part of
// the current period.
type Proration string

const (
	// ProrationNone: the new terms from the next period; nothing now.
	ProrationNone Proration = "none"
	// ProrationChargeNow: an upgrade's unused difference is charged now as
	// an adjustment charge; a downgrade's is credited to the next charges.
	ProrationChargeNow Proration = "charge_now"
	// ProrationCreditNext: a downgrade's unused difference is credited to
	// the next charges; an upgrade's is not charged.
	ProrationCreditNext Proration = "credit_next"
)

// ParseProration reads a proration; ok is false for anything else.
func ParseProration(s string) (Proration, bool) {
	switch p := Proration(s); p {
	case ProrationNone, ProrationChargeNow, ProrationCreditNext:
		return p, true
	}
	return "", false
}

// Event types of changes of terms.
const (
	EventUpdated         = "updated"
	EventUpdateScheduled = "update_scheduled"
	EventUpdateRemoved   = "update_removed"
)

// ErrChargeInFlight refuses a prorated immediate change while a charge of
// the current period is being charged or waits for a person: what it will
// capture, which the proration is measured against, is not known yet. The
// charge keeps its amount; the change may be sent again once it settled,
// or without proration, or at period end.
var ErrChargeInFlight = fault.New(fault.Conflict, "a charge of the current period is in flight")

// ErrChangedBefore: the id a change derives from its request
// (Update.ChangeID) is already a change's: the request's Idempotency-Key
// made it, and the key's stored response has expired since.
var ErrChangedBefore = fault.New(fault.Conflict, "this Idempotency-Key already changed the subscription, and its stored response has expired: use a new key to change it again")

// Update is a requested change of a subscription's terms. Nil fields keep
// the current value.
type Update struct {
	Amount        *int64
	Currency      string // empty, or the subscription's own: a currency never changes
	Interval      *period.Interval
	IntervalCount *int
	Description   *string
	Metadata      map[string]string // nil: unchanged
	Receipt       *Receipt
	Effective     Effective // empty: now
	// Proration is the staff's choice; empty for a customer key, which
	// gets the configured default.
	Proration Proration
	// ChangeID, when not nil, is the id of the change: one derived from
	// the request (its client and Idempotency-Key), so that the request
	// run again after a database restore forgot it makes the same change,
	// whose adjustment charge and restarted periods then carry the keys
	// the gateway already knows. Nil: a new random UUIDv7.
	ChangeID uuid.UUID
}

// Change is what an update did: the row of the changes ledger.
type Change struct {
	ID        uuid.UUID
	Effective Effective
	// Proration is what was applied: none when nothing was prorated (a
	// change at period end, during a trial, before the first period).
	Proration Proration
	// Period is the period whose unused part was prorated; zero when none.
	Period   period.Period
	Fraction proration.Fraction
	// Adjustment is what the proration charges (> 0: an adjustment charge
	// of that amount is to be created in the same transaction) or credited
	// (< 0, already added to the credit balance).
	Adjustment int64
	// Restarted: an interval change started a new period now, to be
	// charged at once.
	Restarted bool
}

// PeriodPaid tells what the charges of the subscription's period
// periodKey captured (net of refunds) and whether one of them is in
// flight. The charges' owner answers it, in tx: subscriptions does not
// read charges.
type PeriodPaid func(ctx context.Context, tx pgx.Tx, subscriptionID uuid.UUID, periodKey string) (captured int64, inFlight bool, err error)

// terms are the values an update may change, as they stand or will stand.
type terms struct {
	amount        int64
	interval      period.Interval
	count         int
	description   string
	metadata      map[string]string
	receipt       *Receipt
	receiptChange bool
}

func (s Subscription) terms() terms {
	return terms{amount: s.Amount, interval: s.Interval, count: s.IntervalCount, description: s.Description,
		metadata: s.Metadata, receipt: s.Receipt}
}

// with is t with the values of the fields given (a nil one keeps t's).
func (t terms) with(amount *int64, interval *period.Interval, count *int, description *string, metadata map[string]string, receipt *Receipt) terms {
	if amount != nil {
		t.amount = *amount
	}
	if interval != nil {
		t.interval = *interval
	}
	if count != nil {
		t.count = *count
	}
	if description != nil {
		t.description = *description
	}
	if metadata != nil {
		t.metadata = metadata
	}
	if receipt != nil {
		t.receipt, t.receiptChange = receipt, true
	}
	return t
}

func (t terms) schedulingChanged(s Subscription) bool {
	return t.interval != s.Interval || t.count != s.IntervalCount
}

// validate checks u against sub, naming every field at fault, and
// returns the terms it leads to. Limits are those of a creation.
func (u Update) validate(sub Subscription, pr Proration) (terms, error) {
	var errs rebilltype.Errors
	if u.Amount != nil && (*u.Amount <= 0 || *u.Amount > maxAmount) {
		errs.Add("amount", "must be an integer number of minor units between 1 and %d", int64(maxAmount))
	}
	if u.Currency != "" && u.Currency != sub.Currency {
		errs.Add("currency", "must be the subscription's currency, %s: a subscription's currency never changes (create a new subscription for another)", sub.Currency)
	}
	if u.Interval != nil {
		if _, err := period.ParseInterval(string(*u.Interval)); err != nil {
			errs.Add("interval", "must be one of day, week, month, quarter, year")
		}
	}
	if u.IntervalCount != nil && (*u.IntervalCount < 1 || *u.IntervalCount > maxIntervalCount) {
		errs.Add("interval_count", "must be 1..%d", maxIntervalCount)
	}
	if u.Description != nil && utf8.RuneCountInString(*u.Description) > maxDescription {
		errs.Add("description", "must be at most %d characters", maxDescription)
	}
	if len(u.Metadata) > maxMetadataKeys {
		errs.Add("metadata", "at most %d keys", maxMetadataKeys)
	}
	for k, v := range u.Metadata {
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKey {
			errs.Add("metadata", "keys must be 1..%d characters", maxMetadataKey)
		}
		if utf8.RuneCountInString(v) > maxMetadataValue {
			errs.Add("metadata."+k, "must be at most %d characters", maxMetadataValue)
		}
	}
	switch u.Effective {
	case "", EffectiveNow, EffectivePeriodEnd:
	default:
		errs.Add("effective", "must be now or period_end")
	}
	if _, ok := ParseProration(string(pr)); !ok {
		errs.Add("proration", "must be none, charge_now or credit_next")
	}
	t := sub.terms().with(u.Amount, u.Interval, u.IntervalCount, u.Description, u.Metadata, u.Receipt)
	if u.Receipt != nil {
		u.Receipt.validate(&errs, "receipt.", t.amount)
	} else if sub.Receipt != nil && t.amount != sub.Amount {
		errs.Add("receipt", "is required: the subscription's payments carry a receipt, and an amount change carries its new one, whose items add up to the new amount (%d)", t.amount)
	}
	if len(errs) == 0 && !t.differs(sub) {
		errs.Add("", "the update changes nothing: at least one of amount, interval, interval_count, description, metadata, receipt must differ from the subscription's")
	}
	return t, errs.Err()
}

func (t terms) differs(s Subscription) bool {
	return t.amount != s.Amount || t.schedulingChanged(s) || t.description != s.Description ||
		!maps.Equal(t.metadata, s.Metadata) || t.receiptChange
}

// Update changes the subscription's terms under its row lock: at once
// (effective now, prorated by pr) or at the current period's end (its
// PendingUpdate, replacing an earlier one). paid reads what the current
// period's charges captured, for a prorated change. An adjustment to
// charge is returned in the Change (the caller creates its charge in tx);
// a credit is granted here. Returns rebilltype.Errors, ErrNotFound,
// a *fsm.TransitionError (cancelled; paused or unpaid with a proration),
// an error wrapping ErrChargeInFlight, or one wrapping ErrChangedBefore
// when u.ChangeID is already a change's.
func (st *Store) Update(ctx context.Context, tx pgx.Tx, id uuid.UUID, u Update, pr Proration, actor Actor, paid PeriodPaid) (Subscription, Change, error) {
	now := st.clock.Now()
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil {
		return Subscription{}, Change{}, err
	}
	t, err := u.validate(sub, pr)
	if err != nil {
		return sub, Change{}, err
	}
	effective := u.Effective
	if effective == "" {
		effective = EffectiveNow
	}
	if sub.Status == Cancelled {
		return sub, Change{}, Machine.Refuse(Cancelled, Cancelled, "the subscription is cancelled: its terms no longer change")
	}
	changeID := u.ChangeID
	if changeID == uuid.Nil {
		if changeID, err = uuid.NewV7(); err != nil {
			return Subscription{}, Change{}, fmt.Errorf("new change id: %w", err)
		}
	}
	if effective == EffectivePeriodEnd {
		return st.schedule(ctx, tx, sub, u, t, changeID, actor, now)
	}
	prorated := pr != ProrationNone && (t.amount != sub.Amount || t.schedulingChanged(sub))
	if prorated && (sub.Status == Paused || sub.Status == Unpaid) {
		return sub, Change{}, Machine.Refuse(sub.Status, sub.Status, fmt.Sprintf(
			"a %s subscription is not charged: change it with proration none, or at period_end", sub.Status))
	}
	ch := Change{ID: changeID, Effective: EffectiveNow, Proration: ProrationNone}
	restart := t.schedulingChanged(sub) && sub.Status != Trialing && sub.NextPeriodIndex > 0
	if restart && sub.CancelAtPeriodEnd {
		return sub, Change{}, Machine.Refuse(sub.Status, sub.Status,
			"a cancel is scheduled at the period end, which an interval change now would move (change the interval effective period_end instead)")
	}
	billed := sub.Status != Trialing && sub.NextPeriodIndex > 0
	if billed && prorated {
		ch.Proration, ch.Period = pr, sub.CurrentPeriod()
		ch.Fraction = proration.Unused(ch.Period.Start, ch.Period.End, now)
		captured, inFlight, err := paid(ctx, tx, sub.ID, ch.Period.Key)
		if err != nil {
			return Subscription{}, Change{}, err
		}
		if inFlight {
			return sub, Change{}, fmt.Errorf("%w: the charge of period %s is still being charged and keeps its amount; send the change again once it settled, or with proration none, or effective period_end",
				ErrChargeInFlight, ch.Period.Key)
		}
		// An interval change ends the period now: its unused part is given
		// back whole, and the new period is charged in full.
		newPrice := t.amount
		if restart {
			newPrice = 0
		}
		delta := proration.Delta(sub.Amount, newPrice, ch.Fraction)
		switch {
		case delta > 0 && pr == ProrationChargeNow:
			ch.Adjustment = delta
		case delta < 0:
			granted, err := st.granted(ctx, tx, sub.ID, ch.Period.Key)
			if err != nil {
				return Subscription{}, Change{}, err
			}
			ch.Adjustment = -min(-delta, proration.CreditCap(captured, granted, ch.Fraction))
		}
	}
	set := `amount = $2, interval = $3, interval_count = $4, description = nullif($5, ''), metadata = $6, receipt = $7,
		credit_balance = credit_balance + $8, updated_at = $9`
	args, err := t.args(ch.Adjustment, now)
	if err != nil {
		return Subscription{}, Change{}, err
	}
	if restart {
		// A new period starts now; its key ends with the change's suffix,
		// so it never equals the paid period's key, even on its first day.
		ch.Restarted = true
		set += `, billing_anchor = $9, next_period_index = 0, next_charge_at = $9, period_key_suffix = $10`
		args = append(args, keySuffix(changeID))
	}
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET `+set+` WHERE id = $1 RETURNING `+columns,
		append([]any{sub.ID}, args...)...))
	if err != nil {
		return Subscription{}, Change{}, fmt.Errorf("update subscription: %w", err)
	}
	if err := st.record(ctx, tx, sub, t, ch, actor, now, &now); err != nil {
		return Subscription{}, Change{}, err
	}
	if err := st.changed(ctx, tx, updated, EventUpdated, sub.Status, sub.Status, actor, now); err != nil {
		return Subscription{}, Change{}, err
	}
	return updated, ch, nil
}

// keySuffix is the period key suffix of a schedule restarted by change id.
func keySuffix(changeID uuid.UUID) string {
	hex := changeID.String()
	return "~" + hex[len(hex)-8:] // the random (or hashed) end, never a UUIDv7's clock
}

// args are the arguments $2..$9 of an UPDATE setting t, credit and now.
func (t terms) args(credit int64, now time.Time) ([]any, error) {
	meta := t.metadata
	if meta == nil {
		meta = map[string]string{}
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	var receiptJSON []byte
	if t.receipt != nil {
		if receiptJSON, err = json.Marshal(t.receipt); err != nil {
			return nil, fmt.Errorf("encode receipt: %w", err)
		}
	}
	return []any{t.amount, t.interval, t.count, t.description, metaJSON, receiptJSON, -min(credit, 0), now}, nil
}

// schedule makes u the subscription's pending update, applied at the
// start of the first period that begins at or after the current period's
// end (next_charge_at), replacing an earlier one.
func (st *Store) schedule(ctx context.Context, tx pgx.Tx, sub Subscription, u Update, t terms, id uuid.UUID, actor Actor, now time.Time) (Subscription, Change, error) {
	pu := &PendingUpdate{ID: id, Amount: u.Amount, Interval: u.Interval, IntervalCount: u.IntervalCount,
		Description: u.Description, Metadata: u.Metadata, Receipt: u.Receipt, EffectiveAt: sub.NextChargeAt, CreatedAt: now}
	puJSON, err := json.Marshal(pu)
	if err != nil {
		return Subscription{}, Change{}, fmt.Errorf("encode pending update: %w", err)
	}
	if sub.PendingUpdate != nil {
		if err := st.removeChange(ctx, tx, sub.PendingUpdate.ID, now); err != nil {
			return Subscription{}, Change{}, err
		}
	}
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET pending_update = $2, updated_at = $3 WHERE id = $1 RETURNING `+columns,
		sub.ID, puJSON, now))
	if err != nil {
		return Subscription{}, Change{}, fmt.Errorf("schedule update: %w", err)
	}
	ch := Change{ID: id, Effective: EffectivePeriodEnd, Proration: ProrationNone}
	if err := st.record(ctx, tx, sub, t, ch, actor, now, nil); err != nil {
		return Subscription{}, Change{}, err
	}
	if err := st.changed(ctx, tx, updated, EventUpdateScheduled, sub.Status, sub.Status, actor, now); err != nil {
		return Subscription{}, Change{}, err
	}
	return updated, ch, nil
}

// RemovePendingUpdate removes the update waiting for the period end.
// Without one the subscription is returned unchanged (changed false).
func (st *Store) RemovePendingUpdate(ctx context.Context, tx pgx.Tx, id uuid.UUID, actor Actor) (Subscription, bool, error) {
	now := st.clock.Now()
	sub, err := st.GetForUpdate(ctx, tx, id)
	if err != nil || sub.PendingUpdate == nil {
		return sub, false, err
	}
	if err := st.removeChange(ctx, tx, sub.PendingUpdate.ID, now); err != nil {
		return Subscription{}, false, err
	}
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET pending_update = NULL, updated_at = $2 WHERE id = $1 RETURNING `+columns,
		id, now))
	if err != nil {
		return Subscription{}, false, fmt.Errorf("remove pending update: %w", err)
	}
	if err := st.changed(ctx, tx, updated, EventUpdateRemoved, sub.Status, sub.Status, actor, now); err != nil {
		return Subscription{}, false, err
	}
	return updated, true, nil
}

// BoundaryIndex is the index, in sub's schedule, of the first period that
// begins at or after its pending update's EffectiveAt: the period whose
// charge is the first at the new terms. ok is false without one.
func (s Subscription) BoundaryIndex() (int, bool) {
	if s.PendingUpdate == nil {
		return 0, false
	}
	sched := s.Schedule()
	at := s.PendingUpdate.EffectiveAt
	k := sched.IndexAt(at)
	if k < 0 || sched.Start(k).Before(at) {
		k++
	}
	return max(k, s.NextPeriodIndex), true
}

// ApplyPending applies the locked subscription's pending update at the
// start of period boundary (BoundaryIndex), before that period is
// charged, in tx: the period's charge is then at the new terms whoever
// creates it. An interval change restarts the schedule there (period 0
// of the new schedule begins at the boundary). Returns the subscription
// as it now stands.
func (st *Store) ApplyPending(ctx context.Context, tx pgx.Tx, sub Subscription, boundary int) (Subscription, error) {
	now := st.clock.Now()
	pu := sub.PendingUpdate
	t := sub.terms().with(pu.Amount, pu.Interval, pu.IntervalCount, pu.Description, pu.Metadata, pu.Receipt)
	at := sub.Schedule().Start(boundary)
	args, err := t.args(0, now)
	if err != nil {
		return Subscription{}, err
	}
	set := `amount = $2, interval = $3, interval_count = $4, description = nullif($5, ''), metadata = $6, receipt = $7,
		credit_balance = credit_balance + $8, updated_at = $9, pending_update = NULL, next_period_index = $10, next_charge_at = $11`
	args = append(args, boundary, at)
	if t.schedulingChanged(sub) {
		set += `, billing_anchor = $11`
		args[len(args)-2] = 0
	}
	updated, err := scan(tx.QueryRow(ctx, `UPDATE subscriptions SET `+set+` WHERE id = $1 RETURNING `+columns,
		append([]any{sub.ID}, args...)...))
	if err != nil {
		return Subscription{}, fmt.Errorf("apply pending update: %w", err)
	}
	// The ledger row says what the change did when it applied: a change
	// made now meanwhile moved the terms it was scheduled against, and a
	// term the pending update leaves alone keeps that change's value.
	if _, err := tx.Exec(ctx, `UPDATE subscription_changes SET applied_at = $2,
			amount_before = $3, amount_after = $4, interval_before = $5, interval_after = $6,
			interval_count_before = $7, interval_count_after = $8
		WHERE id = $1 AND applied_at IS NULL AND removed_at IS NULL`,
		pu.ID, at, sub.Amount, t.amount, sub.Interval, t.interval, sub.IntervalCount, t.count); err != nil {
		return Subscription{}, fmt.Errorf("mark change %s applied: %w", pu.ID, err)
	}
	if err := st.changed(ctx, tx, updated, EventUpdated, sub.Status, sub.Status, System, now); err != nil {
		return Subscription{}, err
	}
	return updated, nil
}

func (st *Store) removeChange(ctx context.Context, tx pgx.Tx, changeID uuid.UUID, now time.Time) error {
	if _, err := tx.Exec(ctx, `UPDATE subscription_changes SET removed_at = $2 WHERE id = $1 AND applied_at IS NULL AND removed_at IS NULL`,
		changeID, now); err != nil {
		return fmt.Errorf("remove change %s: %w", changeID, err)
	}
	return nil
}

// record writes the change's ledger row, and its credit when it grants
// one.
func (st *Store) record(ctx context.Context, tx pgx.Tx, sub Subscription, t terms, ch Change, actor Actor, now time.Time, applied *time.Time) error {
	var periodKey *string
	if ch.Period.Key != "" {
		periodKey = &ch.Period.Key
	}
	den := max(ch.Fraction.Den, 1)
	_, err := tx.Exec(ctx, `INSERT INTO subscription_changes (id, subscription_id, effective, proration, amount_before, amount_after,
			interval_before, interval_after, interval_count_before, interval_count_after, period_key, fraction_num, fraction_den,
			adjustment, created_at, applied_at, actor_id, actor_role)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`,
		ch.ID, sub.ID, ch.Effective, ch.Proration, sub.Amount, t.amount, sub.Interval, t.interval, sub.IntervalCount, t.count,
		periodKey, ch.Fraction.Num, den, ch.Adjustment, now, applied, actor.ID, actor.Role)
	if pg.UniqueViolation(err, "subscription_changes_pkey") {
		return fmt.Errorf("%w: change %s", ErrChangedBefore, ch.ID)
	}
	if err != nil {
		return fmt.Errorf("record change: %w", err)
	}
	if ch.Adjustment < 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO subscription_credits (subscription_id, change_id, period_key, amount, created_at)
			VALUES ($1, $2, $3, $4, $5)`, sub.ID, ch.ID, periodKey, -ch.Adjustment, now); err != nil {
			return fmt.Errorf("grant credit: %w", err)
		}
	}
	return nil
}

// granted is the credit already granted against the period periodKey.
func (st *Store) granted(ctx context.Context, tx pgx.Tx, id uuid.UUID, periodKey string) (int64, error) {
	var n int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(amount), 0) FROM subscription_credits
		WHERE subscription_id = $1 AND period_key = $2 AND amount > 0`, id, periodKey).Scan(&n); err != nil {
		return 0, fmt.Errorf("read credit granted for period %s: %w", periodKey, err)
	}
	return n, nil
}

// CreditUsed tells, for each of the subscriptions' periods (ids[i],
// keys[i]), whether it used credit: a period uses credit once.
func (st *Store) CreditUsed(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, keys []string) ([]bool, error) {
	out := make([]bool, len(ids))
	rows, err := tx.Query(ctx, `SELECT k.i FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS k(sub, key, i)
		WHERE EXISTS (SELECT 1 FROM subscription_credits u WHERE u.subscription_id = k.sub AND u.period_key = k.key AND u.amount < 0)`,
		ids, keys)
	if err != nil {
		return nil, fmt.Errorf("read which periods used credit: %w", err)
	}
	var i int64
	if _, err := pgx.ForEachRow(rows, []any{&i}, func() error {
		out[i-1] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read which periods used credit: %w", err)
	}
	return out, nil
}

// CreditUse is credit a period's charge used.
type CreditUse struct {
	SubscriptionID uuid.UUID
	PeriodKey      string
	PeriodStart    time.Time
	Amount         int64 // > 0: what the charge was reduced by
}

// UseCredits records the credit the periods' charges used and takes it
// off the subscriptions' balances, in one statement, in the transaction
// that creates the charges (the rows are locked by the caller). A period
// uses credit once: a second use of it records and takes nothing.
func (st *Store) UseCredits(ctx context.Context, tx pgx.Tx, uses []CreditUse, now time.Time) error {
	if len(uses) == 0 {
		return nil
	}
	ids := make([][16]byte, len(uses))
	keys := make([]string, len(uses))
	amounts := make([]int64, len(uses))
	starts := make([]time.Time, len(uses))
	for i, u := range uses {
		ids[i], keys[i], amounts[i], starts[i] = u.SubscriptionID, u.PeriodKey, -u.Amount, u.PeriodStart
	}
	_, err := tx.Exec(ctx, `WITH used AS (
			INSERT INTO subscription_credits (subscription_id, period_key, amount, period_start, created_at)
			SELECT * , $4::timestamptz FROM unnest($1::uuid[], $2::text[], $3::bigint[], $5::timestamptz[])
			ON CONFLICT (subscription_id, period_key) WHERE amount < 0 DO NOTHING
			RETURNING subscription_id, amount
		)
		UPDATE subscriptions s SET credit_balance = s.credit_balance + u.total, updated_at = $4
		FROM (SELECT subscription_id, sum(amount) AS total FROM used GROUP BY subscription_id) u
		WHERE s.id = u.subscription_id`, ids, keys, amounts, now, starts)
	if err != nil {
		return fmt.Errorf("use credit: %w", err)
	}
	return nil
}
