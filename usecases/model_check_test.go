package usecases_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/renewals"
	"github.com/rebill/rebill/subscriptions"
)

// chargeMove is one status (or attempt) change of a charge, as the
// database recorded it.
type chargeMove struct {
	id                     int64
	charge, sub            uuid.UUID
	from, to               string
	fromAttempt, toAttempt int
}

type subMove struct {
	id       int64
	sub      uuid.UUID
	from, to string
}

type subEvent struct {
	id       int64
	sub      uuid.UUID
	typ      string
	from, to string
}

func (m *machine) chargeMoves(t *rapid.T) []chargeMove {
	rows, err := m.w.pool.Query(m.ctx, `SELECT id, charge_id, subscription_id, coalesce(from_status, ''), to_status,
		coalesce(from_attempt, 0), to_attempt FROM model_charge_moves WHERE id > $1 ORDER BY id`, m.lastChargeMove)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []chargeMove
	for rows.Next() {
		var mv chargeMove
		if err := rows.Scan(&mv.id, &mv.charge, &mv.sub, &mv.from, &mv.to, &mv.fromAttempt, &mv.toAttempt); err != nil {
			t.Fatal(err)
		}
		out = append(out, mv)
		m.lastChargeMove = mv.id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (m *machine) subMoves(t *rapid.T) []subMove {
	rows, err := m.w.pool.Query(m.ctx, `SELECT id, subscription_id, coalesce(from_status, ''), to_status
		FROM model_sub_moves WHERE id > $1 ORDER BY id`, m.lastSubMove)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []subMove
	for rows.Next() {
		var mv subMove
		if err := rows.Scan(&mv.id, &mv.sub, &mv.from, &mv.to); err != nil {
			t.Fatal(err)
		}
		out = append(out, mv)
		m.lastSubMove = mv.id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (m *machine) subEvents(t *rapid.T) []subEvent {
	rows, err := m.w.pool.Query(m.ctx, `SELECT id, subscription_id, type, coalesce(from_status, ''), to_status
		FROM subscription_events WHERE id > $1 ORDER BY id`, m.lastEvent)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []subEvent
	for rows.Next() {
		var e subEvent
		if err := rows.Scan(&e.id, &e.sub, &e.typ, &e.from, &e.to); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		m.lastEvent = e.id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// check runs after every action: the invariants, and the model against
// the database.
func (m *machine) check(t *rapid.T) {
	defer func() { m.pipelineMay = false }()
	// The provider's ledger: one capture per period, each of a hold of
	// its own attempt; tokens as sent; no capture sent after a cancel.
	if broken := m.w.gw.view().check(); len(broken) > 0 {
		t.Fatalf("gateway ledger:\n  %s", strings.Join(broken, "\n  "))
	}
	// No charge is stranded: one that automation still moves has a job
	// for its current attempt (a discarded one is swept to review by the
	// next scan), and a declined one waits for its dunning date.
	if stranded := m.stranded(t); len(stranded) > 0 {
		t.Fatalf("charges with nothing to move them:\n  %s", strings.Join(stranded, "\n  "))
	}
	// Every charge move is one the state machine allows.
	cmoves := m.chargeMoves(t)
	bySub := map[uuid.UUID][]chargeMove{}
	for _, mv := range cmoves {
		m.w.stats["charge "+mv.from+" -> "+mv.to]++
		bySub[mv.sub] = append(bySub[mv.sub], mv)
		if mv.from == "" {
			if mv.to != string(charges.Scheduled) || mv.toAttempt != 1 {
				t.Fatalf("charge %s created %s a%d, want scheduled a1", mv.charge, mv.to, mv.toAttempt)
			}
			continue
		}
		from, to := charges.Status(mv.from), charges.Status(mv.to)
		if _, through := charges.PassesThrough(from, to); from != to && !charges.CanTransition(from, to) && !through {
			t.Fatalf("charge %s moved %s -> %s: not allowed by charges.CanTransition nor charges.PassesThrough", mv.charge, mv.from, mv.to)
		}
		if mv.toAttempt != mv.fromAttempt && (mv.to != string(charges.Scheduled) || mv.toAttempt != mv.fromAttempt+1) {
			t.Fatalf("charge %s went from a%d (%s) to a%d (%s): a new attempt starts scheduled, one at a time",
				mv.charge, mv.fromAttempt, mv.from, mv.toAttempt, mv.to)
		}
		if mv.to == string(charges.Scheduled) && mv.toAttempt != mv.fromAttempt+1 {
			t.Fatalf("charge %s moved %s -> scheduled without a new attempt (a%d)", mv.charge, mv.from, mv.toAttempt)
		}
	}
	// Every subscription status change is allowed and has exactly one
	// event, in order.
	smoves := m.subMoves(t)
	events := m.subEvents(t)
	for _, s := range m.subs {
		var moved, logged []string
		for _, mv := range smoves {
			if mv.sub == s.id {
				m.w.stats["subscription "+mv.from+" -> "+mv.to]++
				if mv.from != "" && !subscriptions.CanTransition(subscriptions.Status(mv.from), subscriptions.Status(mv.to)) {
					t.Fatalf("%s moved %s -> %s: not allowed by subscriptions.CanTransition", s, mv.from, mv.to)
				}
				moved = append(moved, mv.from+">"+mv.to)
			}
		}
		for _, e := range events {
			if e.sub == s.id && (e.from != e.to || e.typ == subscriptions.EventCreated) {
				logged = append(logged, e.from+">"+e.to)
			}
		}
		if !slices.Equal(moved, logged) {
			t.Fatalf("%s: status moves %v, events %v: every move has exactly one event", s, moved, logged)
		}
		m.checkSub(t, s, smoves, bySub[s.id])
	}
}

// checkSub compares the model of s with the database. Moves the model does
// not predict (a charge's outcome moving the subscription) are accepted
// only during steps of the pipeline or a resolution, and only for the
// reasons the contract gives.
func (m *machine) checkSub(t *rapid.T, s *modelSub, smoves []subMove, cmoves []chargeMove) {
	db, err := m.w.svc.Subscriptions.Get(m.ctx, m.w.pool, s.id)
	if err != nil {
		t.Fatal(err)
	}
	if m.pipelineMay {
		chargeTo := func(status charges.Status) bool {
			for _, mv := range cmoves {
				if mv.to == string(status) && mv.from != mv.to {
					return true
				}
			}
			return false
		}
		predicted, cur := s.status, s.checked
		for _, mv := range smoves {
			if mv.sub != s.id {
				continue
			}
			from, to := subscriptions.Status(mv.from), subscriptions.Status(mv.to)
			if from != cur {
				t.Fatalf("%s moved %s -> %s, but it was %s", s, from, to, cur)
			}
			cur = to
			switch {
			case to == predicted && from != predicted:
				// The move the model predicted (a scan's cancel or resume).
			case from == subscriptions.Paused && to == subscriptions.Active && s.resumedToCancel:
				// A scan resumed a pause that continued its period and, the
				// time kept having run out by then, carried out its
				// scheduled cancel (decision 5): the cancel is predicted.
			case from == subscriptions.Unpaid && to == subscriptions.PastDue && predicted == subscriptions.Active:
				// A card change made meanwhile, with nothing left to
				// retry, leaves unpaid through past due on its way to the
				// active the model predicted.
			case from == subscriptions.Active && to == subscriptions.PastDue && chargeTo(charges.Declined):
			case billable(from) && to == subscriptions.Unpaid && chargeTo(charges.Failed):
				if db.UnpaidSince == nil {
					t.Fatalf("%s is unpaid without unpaid_since (moves %v, predicted %s, checked %s)", s, smoves, predicted, s.checked)
				}
				// The periods that began before the end of dunning are
				// owed, also those no scan had reached yet.
				m.bill(t, s, db.UnpaidSince.Add(-time.Nanosecond))
				s.unpaidSince = append(s.unpaidSince, *db.UnpaidSince)
			case billable(from) && to == subscriptions.Cancelled && s.cancelAtPeriodEnd && chargeTo(charges.Failed):
				// The end of dunning first carries out what a scan at
				// that moment would: here, the cancel at the end of a
				// period that ended by then.
				end := m.dunningEnd(t, s, cmoves)
				if !s.nextChargeAt().Before(end) {
					t.Fatalf("%s cancelled at the end of dunning (%s), before its period ended (%s)", s, end, s.nextChargeAt())
				}
				m.bill(t, s, end.Add(-time.Nanosecond))
			case (from == subscriptions.PastDue || from == subscriptions.Unpaid) && to == subscriptions.Active && chargeTo(charges.Succeeded):
				if from == subscriptions.Unpaid {
					// Periods that began while unpaid are not owed
					// (decisions 7 and 18), however it recovers.
					s.skipStarted(m.now())
				}
			case from == subscriptions.PastDue && to == subscriptions.Active && chargeTo(charges.Voided):
				// The hold of a period not owed (it began while the
				// subscription was unpaid) was released, and nothing else
				// was owed: it is not left past due with nothing to collect.
			default:
				t.Fatalf("%s moved %s -> %s during a charge step; no charge outcome explains it (charge moves %v)", s, from, to, cmoves)
			}
			s.status = to
		}
	}
	s.checked = db.Status
	s.resumedToCancel = false
	var diffs []string
	diff := func(field string, model, got any) {
		if fmt.Sprint(model) != fmt.Sprint(got) {
			diffs = append(diffs, fmt.Sprintf("%s: model %v, database %v", field, model, got))
		}
	}
	diff("status", s.status, db.Status)
	diff("cancel_at_period_end", s.cancelAtPeriodEnd, db.CancelAtPeriodEnd)
	diff("token", s.token, db.PaymentMethod.Token)
	diff("billing_anchor", s.anchor.Format(time.RFC3339Nano), db.BillingAnchor.Format(time.RFC3339Nano))
	diff("next_period_index", s.next, db.NextPeriodIndex)
	diff("next_charge_at", s.nextChargeAt().Format(time.RFC3339Nano), db.NextChargeAt.Format(time.RFC3339Nano))
	diff("resume_at", fmtTime(s.resumeAt), fmtTime(db.ResumeAt))
	diff("cancelled_at", fmtTime(s.cancelledAt), fmtTime(db.CancelledAt))
	// The charges are exactly the owed periods.
	got := map[string]time.Time{}
	for _, c := range m.listCharges(t, s) {
		got[c.PeriodKey] = c.PeriodStart
	}
	for key, start := range got {
		if want, ok := s.owed[key]; !ok || !want.Equal(start) {
			diffs = append(diffs, fmt.Sprintf("charge %s (period starting %s) is not owed", key, start.Format(time.RFC3339)))
		}
	}
	for key, start := range s.owed {
		if _, ok := got[key]; !ok {
			diffs = append(diffs, fmt.Sprintf("owed period %s (starting %s) has no charge", key, start.Format(time.RFC3339)))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("%s differs from the model:\n  %s", s, strings.Join(diffs, "\n  "))
	}
}

// dunningEnd is when the dunning of s ended in this step
// (renewals.DunningEnd): after the due time of the last attempt of the
// charge of s that failed, or the moment a person resolved it as failed.
func (m *machine) dunningEnd(t *rapid.T, s *modelSub, cmoves []chargeMove) time.Time {
	for _, mv := range cmoves {
		if mv.sub != s.id || mv.to != string(charges.Failed) || mv.from == mv.to {
			continue
		}
		c, err := charges.Get(m.ctx, m.w.pool, mv.charge)
		if err != nil {
			t.Fatal(err)
		}
		if c.Resolved {
			c.AttemptDueAt = c.UpdatedAt
		}
		return renewals.DunningEnd(c)
	}
	t.Fatalf("%s: no charge of it failed in this step", s)
	return time.Time{}
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// settle clears the faults, lets time pass through dunning and every
// wait, and drains the jobs with good answers; then the end state is
// judged.
func (m *machine) settle(t *rapid.T) {
	t.Logf("settle: good answers from now on")
	for round := 0; ; round++ {
		if round > 100 {
			t.Fatalf("did not settle in %d rounds", round)
		}
		m.drain(t)
		m.scan(t)
		m.pipelineMay = true
		m.check(t)
		m.drain(t)
		next, ok := m.nextWake(t)
		if !ok {
			break
		}
		m.w.clock.Set(next)
		t.Logf("settle: clock to %s", next.Format(time.RFC3339))
	}
	m.final(t)
}

// drain runs every runnable job, oldest first, with good answers.
func (m *machine) drain(t *rapid.T) {
	for n := 0; ; n++ {
		if n > 500 {
			t.Fatalf("jobs keep coming: %d run without draining", n)
		}
		jobs, err := m.w.runnable(m.ctx, m.subIndex())
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return
		}
		m.work(t, jobs[0], answers{})
		m.pipelineMay = true
		m.check(t)
	}
}

// nextWake is the earliest future time something waits for: a job
// scheduled later, or a dunning retry.
func (m *machine) nextWake(t *rapid.T) (time.Time, bool) {
	var at *time.Time
	err := m.w.pool.QueryRow(m.ctx, `SELECT min(t) FROM (
			SELECT scheduled_at AS t FROM river_job WHERE state IN ('available', 'scheduled', 'retryable') AND kind = ANY($1)
			UNION ALL SELECT next_attempt_at FROM charges WHERE status = 'declined') w`, chargeJobKinds).Scan(&at)
	if err != nil {
		t.Fatal(err)
	}
	if at == nil {
		return time.Time{}, false
	}
	next := at.UTC()
	if !next.After(m.now()) {
		next = m.now().Add(time.Microsecond) // due but not picked: time must move
	}
	return next, true
}

// final judges the settled world (the model's invariants): every charge
// ended paid, failed for good, voided for a reason the contract gives, or
// in review with a reason; every capture belongs to a paid (or reviewed)
// charge of its attempt; no hold is left behind outside review.
func (m *machine) final(t *rapid.T) {
	v := m.w.gw.view()
	caps := v.captures()
	byKey := map[string]charges.Charge{}
	var broken []string
	for _, s := range m.subs {
		// A past-due subscription still owes something: a charge in review
		// waits for a person, and one that failed for good while the
		// subscription was paused (a paused subscription does not become
		// unpaid) waits for a new card.
		owing := false
		for _, c := range m.listCharges(t, s) {
			byKey[c.Key()] = c
			owing = owing || (c.Status == charges.Failed && !c.Resolved) || c.Status == charges.RequiresReview
			name := fmt.Sprintf("%s %s (%s)", s, c.PeriodKey, describe(c))
			switch c.Status {
			case charges.Succeeded:
				if c.Resolved {
					break
				}
				ops := caps[c.Key()]
				if len(ops) != 1 || ops[0].key != c.GatewayKey(gateway.OpCapture) {
					broken = append(broken, fmt.Sprintf("%s: succeeded, but the ledger has captures %v", name, ops))
				}
			case charges.Failed:
			case charges.RequiresReview:
				if strings.TrimSpace(c.ReviewReason) == "" {
					broken = append(broken, name+": in review without a reason")
				}
			case charges.Voided:
				switch c.FailureCode {
				case "subscription_cancelled":
					if s.status != subscriptions.Cancelled {
						broken = append(broken, name+": voided as cancelled, but the subscription is "+string(s.status))
					}
				case "subscription_unpaid":
					ok := false
					for _, since := range s.unpaidSince {
						ok = ok || !c.PeriodStart.Before(since)
					}
					if !ok {
						broken = append(broken, fmt.Sprintf("%s: voided as unpaid, but the period began before the subscription was unpaid (%v)", name, s.unpaidSince))
					}
				default:
					broken = append(broken, name+": voided without a reason")
				}
			default:
				broken = append(broken, name+": left open after settling")
			}
		}
		if s.status == subscriptions.PastDue && !owing {
			broken = append(broken, fmt.Sprintf("%s: past_due after settling, with nothing left to collect", s))
		}
	}
	for chargeKey, ops := range caps {
		c, ok := byKey[chargeKey]
		switch {
		case !ok:
			broken = append(broken, fmt.Sprintf("capture %s of no charge", ops[0].key))
		case c.Status != charges.Succeeded && c.Status != charges.RequiresReview:
			broken = append(broken, fmt.Sprintf("%s captured (%s), but the charge is %s", chargeKey, ops[0].key, describe(c)))
		}
	}
	for _, h := range v.holds {
		if h.capturedBy != "" || h.voidedBy != "" {
			continue
		}
		c := byKey[h.chargeKey]
		current := attemptOf(h.authKey) == attemptOf(c.GatewayKey(gateway.OpAuthorize))
		if c.Status == charges.RequiresReview && strings.TrimSpace(c.ReviewReason) != "" && current {
			continue
		}
		broken = append(broken, fmt.Sprintf("hold %s (%s) neither captured nor voided; its charge is %s", h.ref, h.authKey, describe(c)))
	}
	if len(broken) > 0 {
		slices.Sort(broken)
		t.Fatalf("after settling:\n  %s", strings.Join(broken, "\n  "))
	}
}

func (m *machine) stranded(t *rapid.T) []string {
	rows, err := m.w.pool.Query(m.ctx, `SELECT c.subscription_id, c.period_key, c.status, c.attempt_count
		FROM charges c
		WHERE (c.status = 'declined' AND c.next_attempt_at IS NULL)
		   OR (c.status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown') AND NOT EXISTS (
				SELECT 1 FROM river_job j WHERE (j.args ->> 'charge_id')::uuid = c.id
				  AND (j.args ->> 'attempt')::int = c.attempt_count
				  AND j.state IN ('available', 'scheduled', 'retryable', 'running', 'discarded')))
		ORDER BY c.period_start`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var sub uuid.UUID
		var key, status string
		var attempt int
		if err := rows.Scan(&sub, &key, &status, &attempt); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s: %s a%d", m.byID[sub], key, status, attempt))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
