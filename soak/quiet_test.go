package soak_test

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// drain ends the chaos and lets everything settle: faults off, every node
// up, unanswered requests answered, the clock moved a day at a time past
// every dunning schedule, then quiet.
func (r *runner) drain() {
	for i := 1; i <= 5; i++ {
		gw := fmt.Sprintf("sim%d", i)
		r.request(0, http.MethodPost, "/v1/dev/gateways/"+gw+"/faults", fmt.Sprintf("soak-%d-drain-%s", r.seed, gw),
			map[string]any{"down": false, "latency_ms": 0, "error_rate": 0, "refunds_down": false, "refunds_lost": false},
			120*time.Second)
	}
	for _, gw := range []string{"gmp1", "gmp2"} {
		r.request(0, http.MethodPost, "/v1/dev/registry/"+gw+"/faults", fmt.Sprintf("soak-%d-drain-%s", r.seed, gw),
			map[string]any{"down": false, "error_rate": 0, "lose_response": false, "processing": 0, "annul_unanswered": false},
			120*time.Second)
	}
	r.request(0, http.MethodPost, "/v1/dev/zhkh/zhkh1/faults", fmt.Sprintf("soak-%d-drain-zhkh1", r.seed),
		map[string]any{"down": false, "error_rate": 0, "lose_response": false, "processing": 0}, 120*time.Second)
	for i := range r.nodes {
		r.nodesMu.Lock()
		p := r.nodes[i]
		r.nodesMu.Unlock()
		if p == nil || p.Exited() {
			if err := r.startNode(i); err != nil {
				r.t.Fatalf("restart node %d to settle: %v", i, err)
			}
		}
	}
	t0 := time.Now()
	r.waitQuiet(45 * time.Second)
	took := []string{time.Since(t0).Round(time.Millisecond).String()}
	// Past every dunning schedule (7 days from the first decline), three
	// days at a time: the attempts that fall due within one move run one
	// after another.
	for i := 0; i < 3; i++ {
		t0 = time.Now()
		r.advance(i%2, "72h0m7s", fmt.Sprintf("soak-%d-drain-%d", r.seed, i))
		r.waitQuiet(20 * time.Second)
		took = append(took, time.Since(t0).Round(time.Millisecond).String())
	}
	r.t.Logf("drain: quiet after %s", strings.Join(took, ", "))
	if !r.waitQuiet(60 * time.Second) {
		r.note("not quiet 60s after the last drain move: %s; %s; %s", r.openWork(), r.openCharges(), r.dueSubscriptions())
	}
}

// openWorkSQL counts what is in flight or due. A bill's charge waiting
// for the customer's confirmation (scheduled, confirmation_required) or
// for a dunning attempt ahead of the clock, or in review, is settled for
// now, and so is a cancel at period end of a subscription whose pause
// continues its period (the period ends only after a resume); everything
// else about bills is counted until it is done: a
// scheduled bill due and not yet charged, a paying bill whose charge
// moves or has settled without its bill following, a copy waiting for
// the identity its paying charge may release, a bill past its expires_at
// not yet expired, a posting not yet answered (or abandoned, its job still
// asking the registry), an accepted posting the
// registry sweep must annul (the sweep's own condition), and the
// registry's jobs; refunds not yet answered (pending, unknown) with their
// jobs, and GIS ZhKH reports not yet settled with theirs, counted with the
// postings.
const openWorkSQL = `SELECT
	(SELECT count(*) FROM charges WHERE status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown')
		AND NOT (status = 'scheduled' AND confirmation_required)),
	(SELECT count(*) FROM charges WHERE status = 'declined' AND next_attempt_at <= (SELECT now FROM dev_clock)),
	(SELECT count(*) FROM subscriptions WHERE next_charge_at <= (SELECT now FROM dev_clock)
		AND (status IN ('active', 'past_due') OR (status = 'paused' AND cancel_at_period_end AND paused_time_left_us IS NULL))),
	(SELECT count(*) FROM subscriptions WHERE status = 'paused' AND resume_at <= (SELECT now FROM dev_clock)),
	(SELECT count(*) FROM river_job WHERE (kind LIKE 'charge%' OR kind IN ('registry_post', 'registry_annul', 'refund_send', 'refund_lookup',
			'zhkh_report', 'zhkh_cancel'))
		AND state IN ('available', 'running', 'retryable', 'scheduled', 'pending')),
	(SELECT count(*) FROM bills b JOIN enrollments e ON e.id = b.enrollment_id
		WHERE b.status = 'scheduled' AND b.pay_at <= (SELECT now FROM dev_clock) AND e.status = 'active'),
	(SELECT count(*) FROM bills b LEFT JOIN charges c ON c.id = b.charge_id WHERE b.status = 'paying'
		AND (c.id IS NULL OR NOT (c.status = 'requires_review' OR (c.status = 'scheduled' AND c.confirmation_required)
			OR (c.status = 'declined' AND c.next_attempt_at > (SELECT now FROM dev_clock))))),
	(SELECT count(*) FROM charges c WHERE c.identity_held AND (c.status = 'voided' OR (c.status = 'failed'
		AND (c.hold_released_at IS NOT NULL OR (c.authorized_at IS NULL AND c.review_reason IS NULL))
		AND EXISTS (SELECT 1 FROM bills o JOIN enrollments oe ON oe.id = o.enrollment_id
			WHERE o.identity = c.bill_identity AND o.status = 'duplicate' AND o.charge_id IS NULL AND oe.status <> 'cancelled')))
		AND NOT EXISTS (SELECT 1 FROM registry_postings p
			WHERE (p.charge_id = c.id OR p.uin = c.registry_uin) AND p.status IN ('posting', 'accepted', 'abandoned'))),
	(SELECT count(*) FROM bills WHERE status IN ('pending', 'awaiting_confirmation', 'awaiting_registry', 'scheduled', 'failed')
		AND expires_at <= (SELECT now FROM dev_clock)),
	(SELECT count(*) FROM registry_postings WHERE status IN ('posting', 'abandoned'))
		+ (SELECT count(*) FROM refunds WHERE status IN ('pending', 'unknown'))
		+ (SELECT count(*) FROM zhkh_reports WHERE status IN ('pending', 'cancel_pending')),
	(SELECT count(*) FROM registry_postings p JOIN charges c ON c.id = p.charge_id WHERE p.status = 'accepted'
		AND (c.attempt_count > p.attempt OR c.status IN ('voided', 'declined')
			OR (c.status IN ('requires_review', 'failed') AND c.hold_released_at IS NOT NULL))),
	(SELECT count(*) FROM velocity_counters v CROSS JOIN unnest(v.slots) AS s(holder) WHERE v.name = 'declines'
		AND NOT EXISTS (SELECT 1 FROM charges c WHERE c.id::text || '/' || c.attempt_count = s.holder
			AND c.status IN ('authorizing', 'unknown')))`

func (r *runner) openWork() string {
	var inflight, overdue, due, resumes, jobs, billsDue, paying, releases, expiries, posting, annulments, slots int
	if err := r.db.QueryRow(r.ctx, openWorkSQL).Scan(&inflight, &overdue, &due, &resumes, &jobs, &billsDue, &paying, &releases,
		&expiries, &posting, &annulments, &slots); err != nil {
		return "unknown: " + err.Error()
	}
	if inflight+overdue+due+resumes+jobs+billsDue+paying+releases+expiries+posting+annulments+slots == 0 {
		return ""
	}
	return fmt.Sprintf("%d charges in flight, %d dunning attempts overdue, %d subscriptions due, %d resumes due, %d charge and registry jobs pending, "+
		"%d bills due, %d bills paying, %d bill identities to release, %d bills to expire, %d postings in flight, %d postings to annul, "+
		"%d declines slots of ended attempts",
		inflight, overdue, due, resumes, jobs, billsDue, paying, releases, expiries, posting, annulments, slots)
}

// openCharges describes charges still in flight and their River jobs.
func (r *runner) openCharges() string {
	rows, err := r.db.Query(r.ctx, `SELECT c.id::text, c.status, c.attempt_count, coalesce(c.unknown_phase, ''),
		coalesce(c.failure_code, ''), c.next_attempt_at, coalesce((SELECT string_agg(j.kind || '/a' || (j.args->>'attempt') || ':' || j.state || '#' || j.attempt, ' ')
			FROM river_job j WHERE j.args->>'charge_id' = c.id::text), '')
		FROM charges c WHERE c.status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown') ORDER BY c.id LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var id, status, phase, code, jobs string
		var attempt int
		var next *time.Time
		if err := rows.Scan(&id, &status, &attempt, &phase, &code, &next, &jobs); err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("charge %s %s a%d phase=%q code=%q next=%v jobs=[%s]", id, status, attempt, phase, code, next, jobs))
	}
	return strings.Join(parts, "; ")
}

// openPostings describes the registry postings, refunds and GIS ZhKH
// reports still unanswered, with every River job of each: one with no job
// left waits for nothing.
func (r *runner) openPostings() string {
	rows, err := r.db.Query(r.ctx, `SELECT what, coalesce((SELECT string_agg(j.kind || ':' || j.state || '#' || j.attempt
			|| coalesce(' ' || left(j.errors[array_length(j.errors, 1)]->>'error', 120), ''), ' ')
			FROM river_job j WHERE j.args->>o.arg = o.open_id), '')
		FROM (SELECT 'posting ' || payment_id || ' ' || status || ' charge ' || charge_id || ' a' || attempt || ' ' || left(coalesce(last_error, ''), 120) AS what,
				'payment_id'::text AS arg, payment_id AS open_id
			FROM registry_postings WHERE status IN ('posting', 'abandoned')
			UNION ALL SELECT 'refund ' || id || ' ' || status || ' charge ' || charge_id, 'refund_id', id::text
			FROM refunds WHERE status IN ('pending', 'unknown')
			UNION ALL SELECT 'zhkh report ' || report_id || ' ' || status || ' charge ' || charge_id, 'report_id', report_id
			FROM zhkh_reports WHERE status IN ('pending', 'cancel_pending')) o
		ORDER BY what LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	open, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var what, jobs string
		err := row.Scan(&what, &jobs)
		return what + " jobs=[" + jobs + "]", err
	})
	if err != nil {
		return err.Error()
	}
	return strings.Join(open, "; ")
}

// waitQuiet waits until nothing is in flight or due (twice in a row).
func (r *runner) waitQuiet(limit time.Duration) bool {
	start := time.Now()
	deadline := start.Add(limit)
	quiet := 0
	open := ""
	lastLog := start
	for time.Now().Before(deadline) {
		if *verboseFlag && time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			r.t.Logf("waiting for quiet: %s; %s", open, r.openCharges())
		}
		if open = r.openWork(); open == "" {
			quiet++
			if quiet == 2 {
				return true
			}
		} else {
			quiet = 0
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.t.Logf("not quiet after %s: %s; %s; %s", limit, open, r.openCharges(), r.openPostings())
	return false
}

// dueSubscriptions describes subscriptions due and not charged, with
// their last charge.
func (r *runner) dueSubscriptions() string {
	rows, err := r.db.Query(r.ctx, `SELECT s.id::text, s.status, s.next_charge_at, s.cancel_at_period_end,
			coalesce((SELECT c.period_key || ' ' || c.status || ' a' || c.attempt_count FROM charges c
				WHERE c.subscription_id = s.id ORDER BY c.period_start DESC LIMIT 1), '')
		FROM subscriptions s WHERE s.next_charge_at <= (SELECT now FROM dev_clock)
			AND (s.status IN ('active', 'past_due') OR (s.status = 'paused' AND s.cancel_at_period_end AND s.paused_time_left_us IS NULL))
		ORDER BY s.id LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var id, status, last string
		var next time.Time
		var atEnd bool
		if err := rows.Scan(&id, &status, &next, &atEnd, &last); err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("subscription %s %s next_charge_at=%s cancel_at_period_end=%t last charge %q", id, status,
			next.Format(time.RFC3339), atEnd, last))
	}
	return strings.Join(parts, "; ")
}
