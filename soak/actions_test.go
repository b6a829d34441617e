package soak_test

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/soak"
)

// execute launches steps in order: up to the schedule's window at once,
// each subscription's steps one after another, barriers alone.
func (r *runner) execute(next func() (soak.Step, bool), sched *soak.Schedule) {
	pace, _ := time.ParseDuration(sched.Pace)
	window := max(1, sched.Window)
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	last := map[int]chan struct{}{}
	for {
		step, ok := next()
		if !ok {
			break
		}
		r.counts[step.Kind]++
		switch {
		case step.Kind == soak.KindWait:
			d, _ := time.ParseDuration(step.Wait)
			time.Sleep(d)
			continue
		case step.Barrier():
			wg.Wait()
			r.run(step)
			continue
		}
		var prev chan struct{}
		done := make(chan struct{})
		lane := step.Sub + 100000*step.Enr
		if step.Kind == soak.KindFailover {
			lane = -1 // one failover at a time
		}
		if lane != 0 {
			prev = last[lane]
			last[lane] = done
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer close(done)
			if prev != nil {
				<-prev
			}
			r.run(step)
		}()
		time.Sleep(pace)
	}
	wg.Wait()
}

func (r *runner) idem(step soak.Step, part string) string {
	return fmt.Sprintf("soak-%d-%d%s", r.seed, step.N, part)
}

func (r *runner) subID(step soak.Step) (string, bool) {
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	id, ok := r.subIDs[step.Sub]
	return id, ok
}

func (r *runner) observed(id string) *soak.ObservedSubscription {
	return r.obs.Subscriptions[id]
}

type subscriptionAnswer struct {
	ID            string    `json:"id"`
	Status        string    `json:"status"`
	BillingAnchor time.Time `json:"billing_anchor"`
	Pause         *struct {
		PausedAt time.Time  `json:"paused_at"`
		ResumeAt *time.Time `json:"resume_at"`
	} `json:"pause"`
}

const expYear = 2150

// run executes one step.
func (r *runner) run(step soak.Step) {
	switch step.Kind {
	case soak.KindCreate:
		r.create(step)
	case soak.KindPause, soak.KindResume, soak.KindCancel, soak.KindCard:
		r.subscriptionAction(step)
	case soak.KindUpdate, soak.KindRemovePending, soak.KindEndTrial:
		r.change(step)
	case soak.KindClock:
		r.advance(step.Node, step.Advance, r.idem(step, ""))
	case soak.KindFault:
		body := map[string]any{}
		if step.Down != nil {
			body["down"] = *step.Down
		}
		if step.LatencyMS != nil {
			body["latency_ms"] = *step.LatencyMS
		}
		if step.ErrorRate != nil {
			body["error_rate"] = *step.ErrorRate
		}
		if step.RefundsDown != nil {
			body["refunds_down"] = *step.RefundsDown
		}
		if step.RefundsLost != nil {
			body["refunds_lost"] = *step.RefundsLost
		}
		if a, ok := r.request(step.Node, http.MethodPost, "/v1/dev/gateways/"+step.Gateway+"/faults", r.idem(step, ""), body, 60*time.Second); !ok || a.status != 200 {
			r.note("step %d: faults on %s: %d %s", step.N, step.Gateway, a.status, a.body)
		}
	case soak.KindKill:
		r.nodesMu.Lock()
		p, other := r.nodes[step.Node], r.nodes[1-step.Node]
		if p == nil || p.Exited() || other == nil || other.Exited() {
			r.nodesMu.Unlock()
			return // never the last node alive
		}
		r.nodes[step.Node] = nil
		r.old = append(r.old, p)
		r.kills++
		r.nodesMu.Unlock()
		_ = p.Kill()
	case soak.KindRestart:
		r.nodesMu.Lock()
		p := r.nodes[step.Node]
		r.nodesMu.Unlock()
		if p != nil && !p.Exited() {
			return
		}
		if err := r.startNode(step.Node); err != nil {
			r.note("step %d: restart node %d: %v", step.N, step.Node, err)
		}
	case soak.KindTerminate:
		var n int
		err := r.db.QueryRow(r.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'rebill-soak'`).Scan(&n)
		if err != nil {
			r.note("step %d: terminate: %v", step.N, err)
		}
	case soak.KindPoolCut:
		// Every other backend by pid order: half the pools' connections,
		// whatever their pids' parity.
		var n int
		err := r.db.QueryRow(r.ctx, `SELECT count(pg_terminate_backend(pid)) FROM (
				SELECT pid, row_number() OVER (ORDER BY pid) AS k FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'rebill-soak'
			) AS service WHERE k % 2 = 1`).Scan(&n)
		if err != nil {
			r.note("step %d: pool cut: %v", step.N, err)
		}
	case soak.KindFailover:
		r.failover(step)
	case soak.KindSupport:
		r.support(step)
	case soak.KindRefund:
		r.refund(step)
	case soak.KindSettle:
		r.waitQuiet(90 * time.Second)
	case soak.KindEnrol, soak.KindBill, soak.KindWithdraw, soak.KindEnrolAction, soak.KindEnrolCard, soak.KindRegistryFault,
		soak.KindZhkhFault, soak.KindClockTo, soak.KindPaidElsewhere:
		r.runAutopay(step)
	}
}

func (r *runner) advance(node int, by, idem string) {
	before := r.devNow
	sent := time.Now()
	a, ok := r.request(node, http.MethodPost, "/v1/dev/clock", idem, map[string]any{"advance": by}, 120*time.Second)
	var out struct {
		Now time.Time `json:"now"`
	}
	if !ok || a.status != 200 || a.decode(&out) != nil {
		r.note("clock +%s: %d %s", by, a.status, a.body)
		return
	}
	r.obsMu.Lock()
	r.obs.ClockMoves = append(r.obs.ClockMoves, soak.ClockMove{When: soak.Interval{Sent: sent, Answered: time.Now()}, From: before, To: out.Now})
	r.devNow = out.Now
	r.obsMu.Unlock()
}

func cardBody(c soak.Card) map[string]any {
	return map[string]any{"gateway": c.Gateway, "token": c.Token, "exp_month": 12, "exp_year": expYear}
}

func (r *runner) create(step soak.Step) {
	r.obsMu.Lock()
	now := r.devNow
	r.obsMu.Unlock()
	body := map[string]any{
		"customer_id": fmt.Sprintf("cust-%d", step.Sub), "amount": step.Amount, "currency": "USD",
		"interval": step.Interval, "interval_count": step.Count, "timezone": step.Zone,
		"payment_method": cardBody(*step.Card),
	}
	if step.TrialDays > 0 {
		body["trial_period_days"] = step.TrialDays
	}
	if step.AnchorIn != "" {
		d, _ := time.ParseDuration(step.AnchorIn)
		anchor := now.Add(d)
		if step.MonthEnd {
			loc, _ := time.LoadLocation(step.Zone)
			l := anchor.In(loc)
			last := time.Date(l.Year(), l.Month()+1, 0, l.Hour(), l.Minute(), l.Second(), 0, loc)
			anchor = last
		}
		body["billing_anchor"] = anchor.UTC().Format(time.RFC3339)
	}
	sent := time.Now()
	a, ok := r.post(step, "/v1/subscriptions", body)
	var sub subscriptionAnswer
	if !ok || a.status != http.StatusCreated || a.decode(&sub) != nil {
		r.note("step %d: create: %d %s", step.N, a.status, a.body)
		return
	}
	answered := time.Now()
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	r.subIDs[step.Sub] = sub.ID
	r.cards[step.Sub] = *step.Card
	r.obs.Subscriptions[sub.ID] = &soak.ObservedSubscription{
		Created: soak.Interval{Sent: sent, Answered: answered},
		Anchor:  sub.BillingAnchor,
		Cards: []soak.ObservedCard{{Gateway: step.Card.Gateway, Token: step.Card.Token, Last4: soak.Last4(step.Card.Token),
			Good: soak.GoodToken(step.Card.Token), When: soak.Interval{Sent: sent, Answered: answered}, StatusAfter: sub.Status}},
	}
}

func (r *runner) subscriptionAction(step soak.Step) {
	id, ok := r.subID(step)
	if !ok {
		return // its create did not succeed
	}
	var path string
	body := map[string]any{}
	switch step.Kind {
	case soak.KindPause:
		path = "/pause"
		if step.ResumeIn != "" {
			d, _ := time.ParseDuration(step.ResumeIn)
			r.obsMu.Lock()
			body["resume_at"] = r.devNow.Add(d).UTC().Format(time.RFC3339)
			r.obsMu.Unlock()
		}
		if step.OnResume != "" {
			body["on_resume"] = step.OnResume
		}
	case soak.KindResume:
		path = "/resume"
	case soak.KindCancel:
		path = "/cancel"
		if step.AtPeriodEnd {
			body["at_period_end"] = true
		}
	case soak.KindCard:
		path = "/payment-method"
		body = cardBody(*step.Card)
	}
	sent := time.Now()
	a, ok := r.post(step, "/v1/subscriptions/"+id+path, body)
	answered := time.Now()
	when := soak.Interval{Sent: sent, Answered: answered}
	if !ok {
		r.note("step %d: %s %s: no definite answer (%d %s)", step.N, step.Kind, id, a.status, a.body)
		if step.Kind == soak.KindCard {
			r.obsMu.Lock()
			o := r.observed(id)
			o.Cards = append(o.Cards, soak.ObservedCard{Gateway: step.Card.Gateway, Token: step.Card.Token,
				Last4: soak.Last4(step.Card.Token), Good: soak.GoodToken(step.Card.Token), Unsure: true, When: when})
			r.obsMu.Unlock()
		}
		return
	}
	if a.status != http.StatusOK {
		return // a business refusal (409, 400): nothing happened
	}
	var sub subscriptionAnswer
	if err := a.decode(&sub); err != nil {
		r.note("step %d: %s: %v", step.N, step.Kind, err)
		return
	}
	var snapshot map[string]soak.ChargeState
	var read time.Time
	if step.Kind == soak.KindCancel && !step.AtPeriodEnd && sub.Status == "cancelled" {
		snapshot, read = r.chargeStates(id)
	}
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	o := r.observed(id)
	switch step.Kind {
	case soak.KindPause:
		if sub.Pause != nil {
			onResume := step.OnResume
			if onResume == "" {
				onResume = "start_new_period"
			}
			o.Pauses = append(o.Pauses, soak.ObservedPause{When: when, At: sub.Pause.PausedAt, ResumeAt: sub.Pause.ResumeAt, OnResume: onResume})
		}
	case soak.KindResume:
		o.Resumes = append(o.Resumes, soak.ObservedResume{When: when, BillingAnchor: sub.BillingAnchor})
	case soak.KindCancel:
		if snapshot != nil {
			o.Cancels = append(o.Cancels, soak.ObservedCancel{When: when, Charges: snapshot, Read: read})
		}
	case soak.KindCard:
		same := r.cards[step.Sub] == *step.Card
		o.Cards = append(o.Cards, soak.ObservedCard{Gateway: step.Card.Gateway, Token: step.Card.Token,
			Last4: soak.Last4(step.Card.Token), Good: soak.GoodToken(step.Card.Token), Same: same, When: when, StatusAfter: sub.Status})
		r.cards[step.Sub] = *step.Card
	}
}

// change updates a subscription's terms, removes its pending update, or
// ends its trial, and records what answered 200.
func (r *runner) change(step soak.Step) {
	id, ok := r.subID(step)
	if !ok {
		return // its create did not succeed
	}
	method, path, body := http.MethodPost, "/v1/subscriptions/"+id+"/update", map[string]any{}
	switch step.Kind {
	case soak.KindUpdate:
		if step.NewAmount > 0 {
			body["amount"] = step.NewAmount
		}
		if step.NewInterval != "" {
			body["interval"], body["interval_count"] = step.NewInterval, step.NewCount
		}
		body["effective"] = step.Effective
		if step.Proration != "" {
			body["proration"] = step.Proration
		}
	case soak.KindRemovePending:
		path = "/v1/subscriptions/" + id + "/pending_update/remove"
	case soak.KindEndTrial:
		body["trial_end"] = "now"
	}
	r.obsMu.Lock()
	clock := r.devNow
	r.obsMu.Unlock()
	sent := time.Now()
	a, ok := r.send(step, method, path, body)
	when := soak.Interval{Sent: sent, Answered: time.Now()}
	if !ok {
		r.note("step %d: %s %s: no definite answer (%d %s)", step.N, step.Kind, id, a.status, a.body)
		return
	}
	r.obsMu.Lock()
	what := string(step.Kind)
	if step.Kind == soak.KindUpdate {
		what += " " + step.Effective + " " + step.Proration
	}
	r.changeAnswers[fmt.Sprintf("%s %d %s", what, a.status, a.problemType())]++
	r.obsMu.Unlock()
	if a.status != http.StatusOK {
		return // a business refusal (409, 400): nothing happened
	}
	var sub struct {
		Amount        int64     `json:"amount"`
		Interval      string    `json:"interval"`
		BillingAnchor time.Time `json:"billing_anchor"`
		Pending       *struct {
			EffectiveAt time.Time `json:"effective_at"`
		} `json:"pending_update"`
	}
	if err := a.decode(&sub); err != nil {
		r.note("step %d: %s: %v", step.N, step.Kind, err)
		return
	}
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	o := r.observed(id)
	switch step.Kind {
	case soak.KindUpdate:
		u := soak.ObservedUpdate{When: when, Clock: clock, Effective: step.Effective, Proration: step.Proration,
			Amount: step.NewAmount, Interval: step.NewInterval, Count: step.NewCount, AmountAfter: sub.Amount, IntervalAfter: sub.Interval}
		if sub.Pending != nil {
			at := sub.Pending.EffectiveAt
			u.PendingAt = &at
		}
		o.Updates = append(o.Updates, u)
	case soak.KindEndTrial:
		o.TrialEnds = append(o.TrialEnds, soak.ObservedTrialEnd{When: when, Clock: clock, BillingAnchor: sub.BillingAnchor})
	}
}

// chargeStates reads a subscription's charges from the database, right
// after a cancel answered.
func (r *runner) chargeStates(id string) (map[string]soak.ChargeState, time.Time) {
	out := map[string]soak.ChargeState{}
	for try := 0; try < 20; try++ {
		rows, err := r.db.Query(r.ctx, `SELECT subscription_id::text || ':' || period_key, status, attempt_count,
			coalesce(unknown_phase, '') FROM charges WHERE subscription_id = $1`, id)
		if err == nil {
			for rows.Next() {
				var s soak.ChargeState
				if err = rows.Scan(&s.Key, &s.Status, &s.Attempt, &s.UnknownPhase); err != nil {
					break
				}
				out[s.Key] = s
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err == nil {
			return out, time.Now()
		}
		out = map[string]soak.ChargeState{}
		time.Sleep(50 * time.Millisecond) // a terminated connection: read again
	}
	r.note("charges of %s after its cancel could not be read", id)
	return nil, time.Time{}
}

// support is a person working the review queue: resolve a charge with the
// gateway's evidence (succeeded only when the gateway shows a capture), or
// retry it.
func (r *runner) support(step soak.Step) {
	a, ok := r.request(step.Node, http.MethodGet, "/v1/review-queue?limit=100", "", nil, 20*time.Second)
	if !ok || a.status != 200 {
		return
	}
	var list struct {
		Data []struct {
			ID             string `json:"id"`
			SubscriptionID string `json:"subscription_id"`
			Key            string `json:"key"`
			Status         string `json:"status"`
		} `json:"data"`
	}
	if a.decode(&list) != nil {
		return
	}
	var review []int
	for i, c := range list.Data {
		if c.Status == "requires_review" {
			review = append(review, i)
		}
	}
	if len(review) == 0 {
		return
	}
	c := list.Data[review[step.Pick%len(review)]]
	sent := time.Now()
	switch step.Action {
	case "resolve":
		var captures int
		if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM gatewaysim.operations
			WHERE charge_key = $1 AND op = 'capture' AND status = 'succeeded'`, c.Key).Scan(&captures); err != nil {
			return
		}
		outcome, evidence := "failed", "the gateways' ledgers show no capture of "+c.Key
		if captures > 0 {
			outcome, evidence = "succeeded", "the gateway's ledger shows the capture of "+c.Key
		}
		a, ok := r.request(step.Node, http.MethodPost, "/v1/charges/"+c.ID+"/resolve", r.idem(step, ""),
			map[string]any{"outcome": outcome, "evidence": evidence}, 20*time.Second)
		if ok && a.status == 200 {
			r.obsMu.Lock()
			if o := r.observed(c.SubscriptionID); o != nil {
				o.Resolves = append(o.Resolves, soak.ObservedResolve{ChargeID: c.ID, Outcome: outcome,
					When: soak.Interval{Sent: sent, Answered: time.Now()}, Clock: r.devNow})
			}
			r.obsMu.Unlock()
		}
	case "retry":
		r.request(step.Node, http.MethodPost, "/v1/charges/"+c.ID+"/retry", r.idem(step, ""), map[string]any{}, 20*time.Second)
	}
}

// sampleUnpaid records, every 250 ms, when each unpaid subscription's
// dunning ended (unpaid_since: the API does not show it). It returns the
// function that stops it after one last reading.
func (r *runner) sampleUnpaid() func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	read := func() {
		rows, err := r.db.Query(r.ctx, `SELECT id::text, unpaid_since FROM subscriptions WHERE unpaid_since IS NOT NULL`)
		if err != nil {
			return
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var since time.Time
			if rows.Scan(&id, &since) != nil {
				return
			}
			r.obsMu.Lock()
			if o := r.observed(id); o != nil {
				if n := len(o.UnpaidSince); n == 0 || !o.UnpaidSince[n-1].Equal(since) {
					o.UnpaidSince = append(o.UnpaidSince, since.UTC())
				}
			}
			r.obsMu.Unlock()
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				read()
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() { close(stop); <-done }
}

// refund asks for a refund of the step's pick among the succeeded
// charges (a fine's when the step says so): once, or twice at once on the
// two nodes under two Idempotency-Keys, as two people would. Whatever the
// answers, the refund invariants judge the outcome on the ledgers; a fine
// refunded, or an answer other than a refusal or an acceptance, is noted.
func (r *runner) refund(step soak.Step) {
	rows, err := r.db.Query(r.ctx, `SELECT id::text FROM charges WHERE status = 'succeeded' AND (registry_uin IS NOT NULL) = $1
		ORDER BY id LIMIT 50`, step.Action == "fine")
	if err != nil {
		return
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return
	}
	id := ids[step.Pick%len(ids)]
	body := map[string]any{"reason": step.Reason, "evidence": fmt.Sprintf("soak step %d", step.N)}
	if step.Amount > 0 {
		body["amount"] = step.Amount
	}
	ask := func(node int, part string) {
		a, ok := r.request(node, http.MethodPost, "/v1/charges/"+id+"/refunds", r.idem(step, part), body, 20*time.Second)
		switch {
		case !ok:
		case step.Action == "fine" && a.status < 300:
			r.note("step %d: a fine's charge %s was refunded: %d %s", step.N, id, a.status, a.body)
		case a.status >= 500 && a.status != http.StatusServiceUnavailable:
			r.note("step %d: refund of %s: %d %s", step.N, id, a.status, a.body)
		}
	}
	if !step.Twice {
		ask(step.Node, "")
		return
	}
	var wg sync.WaitGroup
	for node, part := range []string{"-a", "-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ask(node, part)
		}()
	}
	wg.Wait()
}
