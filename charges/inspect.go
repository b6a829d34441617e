package charges

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// StuckKind says why the inspector picked a charge.
type StuckKind string

const (
	// StuckNoJob: an authorize, capture or hold is in flight (authorizing,
	// capturing, authorized) and no River job of its attempt is alive to
	// move it on (the job was deleted, or lost in a way the rescuer and the
	// discard sweep do not see).
	StuckNoJob StuckKind = "no_job"
	// StuckUnknown: the outcome is unknown and its reconcile job is gone or
	// has waited past the threshold.
	StuckUnknown StuckKind = "unknown_overdue"
	// StuckHoldExpiring: authorized for longer than the warning threshold:
	// the hold nears its expiry at the gateway. Reported only.
	StuckHoldExpiring StuckKind = "hold_expiring"
)

// StuckKinds lists every StuckKind: the closed set of
// rebill_inspector_stuck_total's kind label.
var StuckKinds = []StuckKind{StuckNoJob, StuckUnknown, StuckHoldExpiring}

// Stuck is a charge the inspector must act on or report.
type Stuck struct {
	Charge Charge
	Kind   StuckKind
}

// StuckParams are the inspector's thresholds.
type StuckParams struct {
	// Now is the service clock; charge ages are measured on it.
	Now time.Time
	// NoJobAfter: how long an in-flight charge must have stood still
	// before a missing job counts (twice the gateway timeout plus River's
	// rescue time: longer than any job can legitimately be between runs).
	NoJobAfter time.Duration
	// UnknownAfter: how long past its reconcile schedule an unknown charge
	// may wait.
	UnknownAfter time.Duration
	// HoldWarnAfter: how long a charge may stay authorized before its hold
	// is reported as nearing expiry (0: never).
	HoldWarnAfter time.Duration
	Limit         int
}

// notMoving are jobs that name a charge without moving it on: the hold
// check of a charge already in review. Any other live job of the charge's
// attempt, of any kind (a step added later included), counts as alive.
var notMoving = []string{ReleaseHoldArgs{}.Kind()}

// inFlightSteps are the statuses in which a step's job must be alive.
var inFlightSteps = []Status{Authorizing, Capturing, Authorized}

// liveJobStates are the River states of a job that will still run.
var liveJobStates = []string{
	string(rivertype.JobStateAvailable), string(rivertype.JobStatePending), string(rivertype.JobStateRunning),
	string(rivertype.JobStateRetryable), string(rivertype.JobStateScheduled),
}

// FindStuck returns the charges that are stuck by p's thresholds, oldest
// first. A fine's hold waits on its registry posting, whose jobs name the
// posting and not the charge and which sends the charge to review itself
// when it fails for good: it is never found to have no job (a capture job
// now would capture a fine never posted), however long it has waited; a
// hold that nears its expiry is reported, for a fine too. It reads River's job table (the one place that knows whether a
// job is alive) in one statement with the charges: a job is the charge's
// when its args name the charge (charge_id) and, if they name one, its
// attempt. Every status it looks at is in flight: the partial index of
// charges in flight finds them, however many settled charges the table
// holds.
func FindStuck(ctx context.Context, db DBTX, p StuckParams) ([]Stuck, error) {
	rows, err := db.Query(ctx, `WITH live AS (
			SELECT (args ->> 'charge_id')::uuid AS charge_id, (args ->> 'attempt')::int AS attempt,
				min(scheduled_at) AS scheduled_at
			FROM river_job WHERE args ? 'charge_id' AND state = ANY($2) AND kind <> ALL($1)
			GROUP BY 1, 2
		), candidates AS (
			SELECT c.*, live.charge_id IS NOT NULL AS has_job, live.scheduled_at AS job_scheduled_at,
				(c.status = $13 AND c.registry_uin IS NOT NULL AND NOT c.void_requested) AS awaits_posting
			FROM charges c LEFT JOIN live ON live.charge_id = c.id AND coalesce(live.attempt, c.attempt_count) = c.attempt_count
			WHERE c.in_flight AND (c.status = ANY($8) OR c.status = $9)
		)
		SELECT `+columns+`,
			CASE WHEN status = $9 THEN $10
				WHEN NOT has_job AND NOT awaits_posting AND updated_at < $3::timestamptz - $4::interval THEN $11
				ELSE $12 END
		FROM candidates
		WHERE (status = ANY($8) AND NOT has_job AND NOT awaits_posting AND updated_at < $3::timestamptz - $4::interval)
		   OR (status = $9 AND updated_at < $3::timestamptz - $5::interval
				AND (NOT has_job OR job_scheduled_at < now() - $5::interval))
		   OR ($6::interval > '0'::interval AND status = $13 AND updated_at < $3::timestamptz - $6::interval)
		ORDER BY updated_at, id LIMIT $7`,
		notMoving, liveJobStates, p.Now, p.NoJobAfter, p.UnknownAfter, p.HoldWarnAfter, p.Limit,
		texts(inFlightSteps), string(Unknown), string(StuckUnknown), string(StuckNoJob), string(StuckHoldExpiring),
		string(Authorized))
	if err != nil {
		return nil, fmt.Errorf("find stuck charges: %w", err)
	}
	defer rows.Close()
	var out []Stuck
	for rows.Next() {
		var s Stuck
		c, err := scan(withExtra{rows, []any{&s.Kind}})
		if err != nil {
			return nil, fmt.Errorf("find stuck charges: %w", err)
		}
		s.Charge = c
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find stuck charges: %w", err)
	}
	return out, nil
}

// JobInserter is the River client's transactional insert.
type JobInserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// ErrNotKicked: the step's job could not be enqueued again because a
// finished job of the same step and attempt still holds its unique key
// (completed, cancelled or discarded): rerunning it is for a person.
var ErrNotKicked = errors.New("a finished job of this step still holds its unique key")

// Kick enqueues again the job of the step the charge stands in, with the
// same attempt (so the same gateway key): the pipeline's guarded moves make
// a second run of a step that already happened a no-op, so a kick never
// charges twice. It locks the charge and acts only if it has not moved
// since c was read, and returns ErrStale when it has or when the step's job
// is alive again (another inspector kicked it). Returns the job's kind, or
// ErrNotKicked.
func Kick(ctx context.Context, tx pgx.Tx, jobs JobInserter, c Charge) (string, error) {
	if err := lockUnchanged(ctx, tx, c); err != nil {
		return "", err
	}
	var args river.JobArgs
	switch {
	case c.UnknownOp != "" && (c.Status == Authorizing || c.Status == Capturing):
		// A reconcile job was resending the lost call.
		args = LookupArgs{ChargeID: c.ID, Attempt: c.AttemptCount, Op: c.UnknownOp}
	case c.Status == Authorizing:
		args = AuthorizeArgs{ChargeID: c.ID, Attempt: c.AttemptCount}
	case c.Status == Authorized && c.VoidRequested:
		args = VoidArgs{ChargeID: c.ID, Attempt: c.AttemptCount}
	case c.Status == Authorized, c.Status == Capturing:
		args = CaptureArgs{ChargeID: c.ID, Attempt: c.AttemptCount}
	default:
		return "", fmt.Errorf("kick charge %s: nothing to run in status %s", c.ID, c.Status)
	}
	res, err := jobs.InsertTx(ctx, tx, args, nil)
	if err != nil {
		return "", fmt.Errorf("kick charge %s: %w", c.ID, err)
	}
	if res.UniqueSkippedAsDuplicate {
		if res.Job != nil && slices.Contains(liveJobStates, string(res.Job.State)) {
			// Another inspector kicked it first: it is moving again.
			return args.Kind(), ErrStale
		}
		return args.Kind(), ErrNotKicked
	}
	return args.Kind(), nil
}

// ToReview sends a stuck charge to requires_review with code, if it has
// not moved since c was read (ErrStale otherwise); the caller logs why.
// Like the pipeline's own path to review, a charge that may hold an
// authorization gets its hold checked and, unless captured, released.
func (s *Store) ToReview(ctx context.Context, tx pgx.Tx, jobs JobInserter, c Charge, code ReviewCode, now time.Time) (Charge, error) {
	next, err := oneMoved(s.move(ctx, tx, transition{from: []Status{c.Status}, to: RequiresReview,
		where: "updated_at = $3", set: reviewSet}, now, byID(c.ID, c.AttemptCount, ""), code.Sentence(), string(code), c.UpdatedAt))
	if err != nil {
		return Charge{}, err
	}
	if in(c.Status, mayHoldMoney) {
		if _, err := jobs.InsertTx(ctx, tx, ReleaseHoldArgs{ChargeID: c.ID, Attempt: c.AttemptCount}, nil); err != nil {
			return Charge{}, fmt.Errorf("enqueue hold check of charge %s: %w", c.ID, err)
		}
	}
	return next, nil
}

func lockUnchanged(ctx context.Context, tx pgx.Tx, c Charge) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM charges WHERE id = $1 AND status = $2 AND attempt_count = $3 AND updated_at = $4
		FOR UPDATE`, c.ID, string(c.Status), c.AttemptCount, c.UpdatedAt).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrStale
	}
	if err != nil {
		return fmt.Errorf("lock charge %s: %w", c.ID, err)
	}
	return nil
}

// withExtra scans a row of the charge columns followed by more columns.
type withExtra struct {
	pgx.Row
	extra []any
}

func (r withExtra) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }
