package soak

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Owed is the contract's verdict on one period.
type Owed int

const (
	// NotOwed: the period began while the subscription was paused, unpaid
	// or cancelled (or after a scheduled cancel took effect): it must never
	// be captured.
	NotOwed Owed = iota
	// IsOwed: the period began while the subscription was active or past
	// due: it ends with exactly one capture, or failed for good, or in
	// review with a reason (or voided by a later cancel).
	IsOwed
	// Unsure: the record cannot tell which side of a status change the
	// period began on (the change and the start fall in one instant of the
	// service clock, or the change took effect "as of" a time the record
	// does not show). Judged conservatively: at most one capture.
	Unsure
)

func (o Owed) String() string {
	switch o {
	case NotOwed:
		return "not owed"
	case IsOwed:
		return "owed"
	default:
		return "unsure"
	}
}

// Period is one period of a subscription's schedule and the verdict on it.
type Period struct {
	Start   time.Time
	Key     string
	Segment int // which grid: 0 from creation, one more per resume that moved the anchor
	Owed    Owed
	// Statuses are the statuses the subscription may have had when the
	// period began.
	Statuses []string
	// DueFrom is the earliest real time the period's charge can have been
	// created (zero when unknown): not before its grid existed and not
	// before the service clock reached its start.
	DueFrom time.Time
	// UnpaidAsOf: the period began after the subscription's dunning ended
	// (unpaid_since) but before the log showed it unpaid: not owed only
	// because the end of dunning counts as of its due time; a capture sent
	// before the end was processed stands, so it is captured at most once.
	UnpaidAsOf bool
}

// change is one status change of a subscription, effective somewhere in
// [lo, hi] of the service clock.
type change struct {
	id       int64
	lo, hi   time.Time
	from, to string
	kind     string
	// gridStart: the change created the grid whose period 0 starts at lo
	// (creation, a resume that moved the anchor); that period begins after
	// it even at the same instant.
	gridStart bool
	segment   int
	logged    time.Time // the event's at: when the log shows the change
}

type segment struct {
	grid Grid
	// from: the service time the grid took over (its anchor for resumes,
	// creation for the first); until: when the next grid took over.
	from, until time.Time
	hasUntil    bool
	// real: when the grid came to exist in real time (zero if unknown).
	real time.Time
}

// Timeline is a subscription's status history and billing grids,
// rebuilt from its events log and what the driver observed.
type Timeline struct {
	Sub      Subscription
	changes  []change
	segments []segment
	// gridBefore is, for each applied change, the grid in force when it
	// applied (before any grid it started): the grid of its proration.
	gridBefore map[string]int
	// cancelEff is when the cancel took effect (cancelled_at), if any;
	// cancelBySystem: a cancel scheduled at period end took effect.
	cancelEff      *time.Time
	cancelBySystem bool
	cancelPerson   *time.Time // the answer time of a person's immediate cancel, if observed
	// Problems are places where the record contradicts itself or the
	// contract (e.g. a resume answered an anchor the contract does not
	// give): reported by the owed-periods check.
	Problems []string
}

var owing = map[string]bool{"active": true, "past_due": true}

// BuildTimeline rebuilds sub's history. obs may be nil; moves are the dev
// clock's moves (nil when unknown).
func BuildTimeline(sub Subscription, obs *ObservedSubscription, moves []ClockMove) *Timeline {
	tl := &Timeline{Sub: sub}
	events := append([]Event(nil), sub.Events...)
	sort.Slice(events, func(i, j int) bool { return events[i].ID < events[j].ID })
	if len(events) == 0 || events[0].Type != "created" {
		tl.Problems = append(tl.Problems, "the events log does not begin with created")
		return tl
	}
	// The first grid's anchor is the one created answered; without an
	// observer, the current anchor when no resume moved it.
	anchor := sub.BillingAnchor
	var createdReal time.Time
	if obs != nil && !obs.Anchor.IsZero() {
		anchor, createdReal = obs.Anchor, obs.Created.Sent
	}
	// The first grid bills at the interval asked at creation: the first
	// change that restarted the schedule says which it was.
	interval, count := sub.Interval, sub.IntervalCount
	for _, ch := range appliedChanges(sub.Changes) {
		interval, count = ch.IntervalBefore, ch.CountBefore
		break
	}
	g, err := NewGrid(anchor, sub.TimeZone, interval, count)
	if err != nil {
		tl.Problems = append(tl.Problems, "grid: "+err.Error())
		return tl
	}
	tl.segments = []segment{{grid: g, from: events[0].At, real: createdReal}}

	status := ""
	cancelScheduled := false
	applied := appliedChanges(sub.Changes)
	updatedIdx := 0
	var lastPause time.Time      // the service time of the last pause
	var pauseGrid Grid           // the grid in force at that pause
	lastChangeAt := events[0].At // when the last status change was logged
	lastLeftUnpaid := events[0].At
	pauseIdx := 0
	usedUnpaid := map[int]bool{}
	resumeIdx := 0
	for _, e := range events {
		c := change{id: e.ID, lo: e.At, hi: e.At, from: e.From, to: e.To, kind: e.Type, segment: len(tl.segments) - 1, logged: e.At}
		switch e.Type {
		case "created":
			// Period 0 of the first grid begins at the anchor: after the
			// creation even when both fall in one instant.
			if !anchor.After(e.At) {
				c.gridStart = true
			}
		case "paused":
			if e.From != "paused" { // another mode for the same pause keeps its start
				lastPause = e.At
				pauseGrid = tl.segments[len(tl.segments)-1].grid
			}
		case "trial_ended":
			cur := &tl.segments[len(tl.segments)-1]
			if e.System() {
				// The trial ended as of trial_end, the anchor: its first
				// period begins after the change, in the same instant.
				c.lo, c.hi = cur.grid.Anchor, cur.grid.Anchor
				c.gridStart = true
				break
			}
			// A person ended it: the first period begins now.
			ng := cur.grid
			ng.Anchor = e.At
			cur.until, cur.hasUntil = e.At, true
			tl.segments = append(tl.segments, segment{grid: ng, from: e.At, real: trialEndAnswered(obs, e.At)})
			c.gridStart = true
			c.segment = len(tl.segments) - 1
		case "updated":
			if updatedIdx >= len(applied) {
				tl.Problems = append(tl.Problems, fmt.Sprintf("event %d: updated, but no change of the terms was recorded as applied", e.ID))
				break
			}
			ch := applied[updatedIdx]
			updatedIdx++
			if tl.gridBefore == nil {
				tl.gridBefore = map[string]int{}
			}
			tl.gridBefore[ch.ID] = len(tl.segments) - 1
			if !ch.IntervalChanged() {
				break
			}
			// A new interval restarts the grid where the change applied;
			// before the grid's first period began, at that anchor.
			eff := *ch.AppliedAt
			cur := &tl.segments[len(tl.segments)-1]
			anchorAt := eff
			if cur.grid.Anchor.After(eff) {
				anchorAt = cur.grid.Anchor
			}
			ng, err := NewGrid(anchorAt, sub.TimeZone, ch.IntervalAfter, ch.CountAfter)
			if err != nil {
				tl.Problems = append(tl.Problems, fmt.Sprintf("event %d: change %s: %v", e.ID, ch.ID, err))
				break
			}
			cur.until, cur.hasUntil = eff, true
			real := clockReached(moves, eff)
			if ch.Effective == "now" {
				real = updateAnswered(obs, eff)
			}
			tl.segments = append(tl.segments, segment{grid: ng, from: eff, real: real})
			c.lo, c.hi = eff, eff
			c.gridStart = true
			c.segment = len(tl.segments) - 1
			tl.changes = append(tl.changes, c)
			continue
		case "resumed":
			eff, known := e.At, true
			if e.System() {
				// A scheduled resume takes effect as of its resume_at.
				if ra, ok := tl.resumeAtBefore(obs, e, &pauseIdx); ok {
					eff = ra
					c.lo, c.hi = ra, ra
				} else {
					known = false
					c.lo = lastChangeAt
				}
			}
			cur := &tl.segments[len(tl.segments)-1]
			// A resume in the instant of the anchor (another resume's,
			// the same service-clock instant) moves nothing: the grid,
			// and when its first period could be charged, are the first
			// resume's.
			keep := cancelScheduled || !cur.grid.Anchor.Before(eff)
			// A pause that continues its period keeps the time left at
			// the pause, until the period's end (or, before billing began,
			// until the first anchor): the next period begins that long
			// after the resume, whatever is scheduled (a scheduled cancel
			// falls then).
			anchorAt, until := eff, eff
			// The old grid ends with the period the pause interrupted
			// (one that began in the pause's instant included). The time
			// kept is what was left at the pause on the grid in force
			// then, even when an interval change while paused restarted
			// the grid since.
			end := pauseGrid.Anchor
			if !lastPause.Before(end) {
				end = pauseGrid.periodEnd(lastPause)
			}
			continued := eff.Add(end.Sub(lastPause))
			if tl.continuedPause(obs, e, lastPause, continued, resumeIdx) {
				keep, until = false, lastPause.Add(time.Nanosecond)
				anchorAt = continued
			}
			switch {
			case keep:
			case known:
				ng := cur.grid
				ng.Anchor = anchorAt
				var real time.Time
				if e.System() {
					real = clockReached(moves, eff)
				} else {
					real = tl.resumeAnswered(obs, anchorAt, &resumeIdx)
				}
				cur.until, cur.hasUntil = until, true
				tl.segments = append(tl.segments, segment{grid: ng, from: eff, real: real})
				c.gridStart = true
				c.segment = len(tl.segments) - 1
			default:
				tl.Problems = append(tl.Problems, fmt.Sprintf("event %d: a scheduled resume whose resume_at was not observed moved the anchor to an unknown time", e.ID))
			}
			// A resume in the very instant of the anchor answers the same
			// anchor whether it kept it or moved it there: nothing to tell.
			if !e.System() && obs != nil && !cur.grid.Anchor.Equal(anchorAt) {
				tl.checkResumeAnswer(obs, e, keep, anchorAt)
			}
		case "cancel_scheduled":
			cancelScheduled = true
		case "cancelled":
			eff := e.At
			if sub.CancelledAt != nil {
				eff = *sub.CancelledAt
			}
			c.lo, c.hi = eff, eff
			t := eff
			tl.cancelEff = &t
			tl.cancelBySystem = e.System()
			if !e.System() && obs != nil && len(obs.Cancels) > 0 {
				a := obs.Cancels[0].When.Answered
				tl.cancelPerson = &a
			}
		case "unpaid":
			// Unpaid as of the end of dunning (unpaid_since), which the
			// log does not show: observed in the database when it could
			// be, else somewhere since the last change.
			c.lo = lastChangeAt
			s, sampled := unpaidSample(obs, lastLeftUnpaid, e.At, usedUnpaid)
			if sampled {
				c.lo, c.hi = s, s
			}
			if resolvedFailedAt(obs, e.At) {
				// A person resolved a charge as failed: unpaid from then,
				// unless another charge's dunning ended in the same instant
				// of the service clock, as of an earlier due time (the
				// sample shows it): the record cannot tell which came first.
				c.lo, c.hi = e.At, e.At
				if sampled && s.Before(e.At) && dunningFailedAny(sub, s) {
					c.lo = s
				}
			}
		}
		if e.Type != "created" && e.From == e.To {
			continue // not a status change
		}
		if status == "unpaid" && e.To != "unpaid" {
			lastLeftUnpaid = e.At
		}
		status = e.To
		lastChangeAt = e.At
		if c.lo.After(c.hi) {
			c.lo = c.hi
		}
		tl.changes = append(tl.changes, c)
	}
	return tl
}

// dunningFailedAny reports whether a charge of sub may have reached the
// end of its own dunning before since: failed, and no person resolved it;
// or retried (more than one attempt, no person's verdict) for a period
// that began before since, which a card change may have paid since its
// dunning ended.
func dunningFailedAny(sub Subscription, since time.Time) bool {
	for _, c := range sub.Charges {
		if c.Resolution != "" {
			continue
		}
		if c.Status == "failed" || (c.AttemptCount > 1 && c.PeriodStart.Before(since)) {
			return true
		}
	}
	return false
}

// appliedChanges are the changes whose terms took effect, in the order
// they did.
func appliedChanges(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		if c.AppliedAt != nil {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].AppliedAt.Before(*out[j].AppliedAt) })
	// Changes applied in one instant of the clock (the dev clock stands
	// still between requests) cannot be ordered by time, nor by id (ids
	// derived from Idempotency-Keys are in no order): each took the terms
	// the one before it left, so they are chained.
	var running *terms
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && out[j].AppliedAt.Equal(*out[i].AppliedAt) {
			j++
		}
		chainTies(out[i:j], running)
		t := out[j-1].after()
		running = &t
		i = j
	}
	return out
}

// terms are what a change of the amount and the interval moves between.
type terms struct {
	amount   int64
	interval string
	count    int
}

func (c Change) before() terms { return terms{c.AmountBefore, c.IntervalBefore, c.CountBefore} }
func (c Change) after() terms  { return terms{c.AmountAfter, c.IntervalAfter, c.CountAfter} }

// chainTies orders changes of one instant so that each begins from the
// terms the one before it ended with, the first from running (nil: from
// terms no other change of the instant ended with).
func chainTies(group []Change, running *terms) {
	for k := range group {
		pick := -1
		for m := k; m < len(group) && pick < 0; m++ {
			if running != nil && group[m].before() == *running {
				pick = m
			}
		}
		for m := k; m < len(group) && pick < 0; m++ {
			ended := false
			for n := k; n < len(group); n++ {
				ended = ended || (n != m && group[n].after() == group[m].before() && group[n].before() != group[n].after())
			}
			if !ended {
				pick = m
			}
		}
		if pick < 0 {
			pick = k
		}
		group[k], group[pick] = group[pick], group[k]
		t := group[k].after()
		running = &t
	}
}

// pausedOnResume is what the pause that began at service time at said
// its resume would do, as last asked ("" when it was not observed).
func pausedOnResume(obs *ObservedSubscription, at time.Time) string {
	if obs == nil {
		return ""
	}
	mode := "" // the last one asked for the pause that began at at
	for _, p := range obs.Pauses {
		if p.At.Equal(at) {
			mode = p.OnResume
		}
	}
	return mode
}

// continuedPause reports whether the pause that began at service time
// pausedAt, which resume e ended, kept its period's time. Pauses that began
// in one instant of the clock, separate pauses each ended by a resume in
// that instant, cannot be told apart by their answers' paused_at: when they
// asked for both modes, a person's resume tells which by the anchor it
// answered (continued, the resume plus the time kept; else not).
func (tl *Timeline) continuedPause(obs *ObservedSubscription, e Event, pausedAt, continued time.Time, resumeIdx int) bool {
	if obs == nil {
		return false
	}
	modes := map[string]bool{}
	for _, p := range obs.Pauses {
		if p.At.Equal(pausedAt) {
			modes[p.OnResume] = true
		}
	}
	last := pausedOnResume(obs, pausedAt) == "continue_period"
	if len(modes) < 2 || e.System() {
		return last
	}
	for i := resumeIdx; i < len(obs.Resumes); i++ {
		if obs.Resumes[i].BillingAnchor.Equal(continued) {
			return true
		}
		if obs.Resumes[i].BillingAnchor.Equal(e.At) {
			return false
		}
	}
	return last
}

// trialEndAnswered is when the person's end of a trial at service time
// at was sent (zero when not observed).
func trialEndAnswered(obs *ObservedSubscription, at time.Time) time.Time {
	if obs == nil {
		return time.Time{}
	}
	for _, t := range obs.TrialEnds {
		if t.Clock.Equal(at) {
			return t.When.Sent
		}
	}
	return time.Time{}
}

// updateAnswered is when the immediate update made at service time at
// was sent (zero when not observed).
func updateAnswered(obs *ObservedSubscription, at time.Time) time.Time {
	if obs == nil {
		return time.Time{}
	}
	for _, u := range obs.Updates {
		if u.Effective == "now" && u.Clock.Equal(at) {
			return u.When.Sent
		}
	}
	return time.Time{}
}

// GridAt is the grid in force at service time t: the last one that took
// over at or before it.
func (tl *Timeline) GridAt(t time.Time) (Grid, bool) {
	for i := len(tl.segments) - 1; i >= 0; i-- {
		if !tl.segments[i].from.After(t) {
			return tl.segments[i].grid, true
		}
	}
	return Grid{}, false
}

// resumeAtBefore finds the resume_at of the pause that a scheduled resume
// ended: the latest observed pause answered before the resume was logged.
func (tl *Timeline) resumeAtBefore(obs *ObservedSubscription, e Event, idx *int) (time.Time, bool) {
	if obs == nil {
		return time.Time{}, false
	}
	var found *time.Time
	for i := *idx; i < len(obs.Pauses); i++ {
		p := obs.Pauses[i]
		if p.At.After(e.At) {
			break
		}
		if p.ResumeAt != nil && !p.ResumeAt.After(e.At) {
			t := *p.ResumeAt
			found = &t
			*idx = i + 1
		}
	}
	if found == nil {
		return time.Time{}, false
	}
	return *found, true
}

// resumeAnswered is when the resume that answered anchor eff was sent.
func (tl *Timeline) resumeAnswered(obs *ObservedSubscription, eff time.Time, idx *int) time.Time {
	if obs == nil {
		return time.Time{}
	}
	for i := *idx; i < len(obs.Resumes); i++ {
		if obs.Resumes[i].BillingAnchor.Equal(eff) {
			*idx = i + 1
			return obs.Resumes[i].When.Sent
		}
	}
	return time.Time{}
}

// checkResumeAnswer compares the anchor a person's resume answered with
// the contract: moved to the resume once billing has begun, kept before
// the first anchor or with a cancel scheduled.
func (tl *Timeline) checkResumeAnswer(obs *ObservedSubscription, e Event, keep bool, eff time.Time) {
	for _, r := range obs.Resumes {
		if r.BillingAnchor.Equal(eff) {
			if keep {
				tl.Problems = append(tl.Problems, fmt.Sprintf("event %d: resume at %s moved the anchor although the contract keeps it (a cancel is scheduled or billing has not begun)", e.ID, fmtT(eff)))
			}
			return
		}
	}
	if !keep {
		tl.Problems = append(tl.Problems, fmt.Sprintf("event %d: resume at %s: no resume answer shows the anchor moved to the resume", e.ID, fmtT(eff)))
	}
}

// unpaidSample picks the observed unpaid_since of the unpaid phase logged
// at at, which began after the subscription last left unpaid.
func unpaidSample(obs *ObservedSubscription, after, at time.Time, used map[int]bool) (time.Time, bool) {
	if obs == nil {
		return time.Time{}, false
	}
	best, ok := -1, false
	for i, s := range obs.UnpaidSince {
		if used[i] || s.After(at) || s.Before(after) {
			continue
		}
		if !ok || s.After(obs.UnpaidSince[best]) {
			best, ok = i, true
		}
	}
	if !ok {
		return time.Time{}, false
	}
	used[best] = true
	return obs.UnpaidSince[best], true
}

// resolvedFailedAt reports whether the driver resolved a charge of the
// subscription as failed while the service clock read at.
func resolvedFailedAt(obs *ObservedSubscription, at time.Time) bool {
	if obs == nil {
		return false
	}
	for _, r := range obs.Resolves {
		if r.Outcome == "failed" && r.Clock.Equal(at) {
			return true
		}
	}
	return false
}

// clockReached is the real time of the dev-clock move that first took the
// clock to t or beyond; zero if the clock was already there (or unknown).
func clockReached(moves []ClockMove, t time.Time) time.Time {
	for _, m := range moves {
		if !m.To.Before(t) {
			if m.From.Before(t) {
				return m.When.Sent
			}
			return time.Time{}
		}
	}
	return time.Time{}
}

// Periods lists every period that began by now on the subscription's
// grids, with the verdict on each.
func (tl *Timeline) Periods(now time.Time, moves []ClockMove) []Period {
	var out []Period
	for i, seg := range tl.segments {
		until := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
		if seg.hasUntil {
			until = seg.until
		}
		for _, start := range seg.grid.Starts(until, now) {
			p := Period{Start: start, Key: seg.grid.Key(start), Segment: i}
			p.Statuses, p.UnpaidAsOf = tl.statusesAt(start, i)
			p.Owed = verdict(p.Statuses)
			due := clockReached(moves, start)
			if seg.real.After(due) {
				due = seg.real
			}
			p.DueFrom = due
			out = append(out, p)
		}
	}
	return out
}

func verdict(statuses []string) Owed {
	all, none := true, true
	for _, s := range statuses {
		if owing[s] {
			none = false
		} else {
			all = false
		}
	}
	switch {
	case all && !none:
		return IsOwed
	case none:
		return NotOwed
	default:
		return Unsure
	}
}

// statusesAt is every status the subscription may have had when a period
// of grid seg began at t.
func (tl *Timeline) statusesAt(t time.Time, seg int) (statuses []string, unpaidAsOf bool) {
	set := map[string]bool{}
	var before *change
	var unsure []change
	for i := range tl.changes {
		c := tl.changes[i]
		switch {
		case c.gridStart && c.lo.Equal(t) && c.segment == seg:
			before = &tl.changes[i]
		case c.hi.Before(t):
			if before == nil || c.id > before.id {
				before = &tl.changes[i]
			}
		case c.lo.After(t):
		default:
			unsure = append(unsure, c)
		}
	}
	// A cancel is final: once it took effect, nothing after it counts.
	if tl.cancelEff != nil {
		switch {
		case tl.cancelBySystem && !t.Before(*tl.cancelEff), !tl.cancelBySystem && t.After(*tl.cancelEff):
			return []string{"cancelled"}, false
		case !tl.cancelBySystem && t.Equal(*tl.cancelEff):
			set["cancelled"] = true
		}
	}
	if before != nil {
		set[before.to] = true
		unpaidAsOf = before.kind == "unpaid" && t.Before(before.logged)
	}
	for _, c := range unsure {
		if c.kind == "cancelled" {
			continue // handled above
		}
		set[c.to] = true
		if c.from != "" {
			set[c.from] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, unpaidAsOf
}

// CancelledAfter reports whether the subscription was cancelled at or
// after t (so a charge of the period starting at t may be voided).
func (tl *Timeline) CancelledAfter(t time.Time) bool {
	return tl.cancelEff != nil && !tl.cancelEff.Before(t)
}

func fmtT(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func joinStatuses(s []string) string { return strings.Join(s, "|") }
