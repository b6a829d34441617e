package drill_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/enrollments"
)

// autopayFigures are what a run measured of its autopay load and its
// subscription updates, for SOAK.md.
type autopayFigures struct {
	Fines   int `json:"fines"`
	Housing int `json:"housing_bills"`
	// BillsRepushed are the bills the issuer pushed before the kill (the
	// stop) and pushed again, under the same Idempotency-Key, because the
	// database the nodes came back on did not hold them.
	BillsRepushed int `json:"bills_repushed"`
	// FinesHeldAtKill, FinesAcceptedAtKill and FinesCapturedAtKill are the
	// gateway's holds, the registry's accepted payments and the gateway's
	// captures of fines at the kill (the stop).
	FinesHeldAtKill     int `json:"fines_held_at_kill"`
	FinesAcceptedAtKill int `json:"fines_accepted_at_registry_at_kill"`
	FinesCapturedAtKill int `json:"fines_captured_at_kill"`
	FinesHeld           int `json:"fines_held"`
	// FinesPosted are the payments the registry's book holds (accepted or
	// annulled); PostingsAnnulled those of them annulled.
	FinesPosted      int `json:"registry_payments"`
	PostingsAnnulled int `json:"registry_payments_annulled"`
	FinesCaptured    int `json:"fines_captured"`
	HousingCaptured  int `json:"housing_captured"`
	// UpdatesLost are the immediate price changes the client was answered
	// for before the kill (the stop) and the database the nodes came back
	// on did not hold; every update is sent again under its key.
	UpdatesAsked        int `json:"updates_asked"`
	UpdatesLost         int `json:"updates_lost"`
	UpdatesResent       int `json:"updates_resent"`
	AdjustmentsCaptured int `json:"adjustments_captured"`
}

// registryDelay slows every post to the registry, so that fines are
// between their hold and their capture when the primary dies.
const registryDelay = 150 * time.Millisecond

// startRegistry runs the registry party, kind http, in the test's
// process: its book lives outside the databases the drill fails, as the
// gateway's does. It stamps the dev clock, as the gateway does.
func (d *drill) startRegistry() {
	d.registry = agentfake.New()
	d.registry.Now = d.clk.Now
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			time.Sleep(registryDelay)
		}
		d.registry.ServeHTTP(w, r)
	}))
	d.t.Cleanup(srv.Close)
	file := filepath.Join(d.t.TempDir(), "registries.yaml")
	if err := os.WriteFile(file, []byte("- name: gmpx\n  kind: http\n  base_url: "+srv.URL+"\n"), 0o600); err != nil {
		d.t.Fatal(err)
	}
	d.env["REBILL_REGISTRY_FILE"] = file
}

// enrolment is one autopay enrollment of the drill and the one bill its
// issuer pushes.
type enrolment struct {
	id   uuid.UUID
	kind string // fines or housing
	bill string // the fine's UIN, or the housing bill's id
	idem string
	body map[string]any
}

func (e enrolment) key() string { return e.id.String() + ":" + e.bill }

// uin is a valid 20-digit fine identifier made of n.
func uin(n int) string {
	body := fmt.Sprintf("188%016d", n)
	return body + fmt.Sprint(enrollments.UINCheckDigit(body))
}

// moscowDate is the Moscow date days after at.
func moscowDate(at time.Time, days int) string {
	return at.In(time.FixedZone("MSK", 3*3600)).AddDate(0, 0, days).Format(time.DateOnly)
}

// createEnrollments enrols fines fine accounts and housing housing
// accounts, every card paying, each under its own Idempotency-Key.
func (d *drill) createEnrollments(fines, housing int) {
	for i := range fines + housing {
		e := enrolment{kind: "fines"}
		body := map[string]any{"customer_id": fmt.Sprintf("drill-autopay-%d", i), "currency": "RUB", "max_amount": 1000000,
			"payment_method": map[string]any{"gateway": gatewayName, "token": fmt.Sprintf("tok_ok_autopay_%d", i), "exp_month": 12, "exp_year": 2035}}
		if i < fines {
			body["kind"], body["account_ref"] = "fines", map[string]any{"sts": fmt.Sprintf("77УА%06d", d.plan.seed*100+i)}
			e.bill = uin(d.plan.seed*1000 + i)
			d.fig.Fines++
		} else {
			e.kind = "housing"
			body["kind"], body["account_ref"], body["pay_day"] = "housing", fmt.Sprintf("75ДА%06d", d.plan.seed*100+i), 10
			e.bill = fmt.Sprintf("ZHKU-drill-%d", i)
			d.fig.Housing++
		}
		var out struct {
			ID uuid.UUID `json:"id"`
		}
		d.call(i, http.MethodPost, "/v1/enrollments", fmt.Sprintf("drill-enrol-%d-%d", d.plan.seed, i), body, &out)
		e.id = out.ID
		d.enrs = append(d.enrs, e)
	}
}

// pushBills is each issuer pushing its bill, at at: a fine at its
// discount (charged on arrival), a housing bill due within the dunning
// room (so charged on arrival too, not on its pay day).
func (d *drill) pushBills(at time.Time) {
	for i := range d.enrs {
		e := &d.enrs[i]
		if e.kind == "fines" {
			e.body = map[string]any{"bill_id": e.bill, "amount": 100000, "discounted_amount": 50000,
				"issued_at": at.Add(-time.Hour).Format(time.RFC3339), "discount_deadline": moscowDate(at, 20), "due_date": moscowDate(at, 70)}
		} else {
			e.body = map[string]any{"bill_id": e.bill, "amount": 250000, "issued_at": at.Add(-time.Hour).Format(time.RFC3339),
				"due_date": moscowDate(at, 3)}
		}
		e.idem = fmt.Sprintf("drill-bill-%d-%d", d.plan.seed, i)
		d.call(i, http.MethodPost, "/v1/enrollments/"+e.id.String()+"/bills", e.idem, e.body, nil)
	}
}

// waitFinesPosted waits until half the fines (at least one) are accepted
// at the registry, so that the kill finds fines posted and not yet
// captured, and others not yet posted.
func (d *drill) waitFinesPosted() {
	want := max(1, d.fig.Fines/2)
	d.waitFor("fines accepted at the registry", 60*time.Second, func() bool {
		n := 0
		for _, e := range d.registry.Ledger() {
			if e.Status == "accepted" {
				n++
			}
		}
		return n >= want
	})
}

// autopayAtKill counts, at the kill, the fines the gateway held and
// captured and the registry accepted.
func (d *drill) autopayAtKill() {
	held, captured := d.fineOps()
	d.fig.FinesHeldAtKill, d.fig.FinesCapturedAtKill = len(held), len(captured)
	for _, e := range d.registry.Ledger() {
		if e.Status == "accepted" {
			d.fig.FinesAcceptedAtKill++
		}
	}
}

// fineOps are the fines' charge keys the gateway holds an authorization
// of, and those it captured, each with its number of captures.
func (d *drill) fineOps() (held map[string]bool, captured map[string]int) {
	fines := map[string]bool{}
	for _, e := range d.enrs {
		if e.kind == "fines" {
			fines[e.key()] = true
		}
	}
	rows, err := d.book.Query(d.ctx, `SELECT idempotency_key, op FROM gatewaysim.operations
		WHERE op IN ('authorize', 'capture') AND status = 'succeeded'`)
	if err != nil {
		d.fatalf("read the gateway's book: %v", err)
	}
	defer rows.Close()
	held, captured = map[string]bool{}, map[string]int{}
	for rows.Next() {
		var key, op string
		if err := rows.Scan(&key, &op); err != nil {
			d.fatalf("read the gateway's book: %v", err)
		}
		chargeKey, _, _, ok := charges.ParseGatewayKey(key)
		if !ok || !fines[chargeKey] {
			continue
		}
		if op == "authorize" {
			held[chargeKey] = true
		} else {
			captured[chargeKey]++
		}
	}
	if err := rows.Err(); err != nil {
		d.fatalf("read the gateway's book: %v", err)
	}
	return held, captured
}

// repushBills is each issuer, after the failover (the restore), finding
// its bill missing from the enrollment and pushing it again with the
// same Idempotency-Key and body.
func (d *drill) repushBills() {
	for i, e := range d.enrs {
		var n int
		d.replicaQuery2(`SELECT count(*) FROM bills WHERE enrollment_id = $1 AND bill_id = $2`, &n, e.id, e.bill)
		if n > 0 {
			continue
		}
		d.call(i, http.MethodPost, "/v1/enrollments/"+e.id.String()+"/bills", e.idem, e.body, nil)
		d.fig.BillsRepushed++
	}
}

// update is an immediate price change the drill's client asked for.
type update struct {
	sub    uuid.UUID
	amount int64
	idem   string
	body   map[string]any
}

// updateSome raises, at once with proration charge_now, the price of one
// in ten subscriptions (at least two) whose card pays and whose period
// that began at at is captured (a change is refused while its period's
// charge is in flight): each makes an adjustment charge of the full
// difference, the period having just begun.
func (d *drill) updateSome(subs []sub, at time.Time) {
	conn, err := pgx.Connect(d.ctx, d.primary.TCPURL("rebill"))
	if err != nil {
		d.fatalf("connect to the primary: %v", err)
	}
	defer conn.Close(d.ctx)
	want := max(2, d.plan.subs/10)
	key := at.UTC().Format(time.DateOnly)
	var chosen []sub
	d.waitFor("captured periods to change the price of", 30*time.Second, func() bool {
		chosen = chosen[:0]
		for _, s := range subs {
			if s.card.kind != "pays" || len(chosen) == want {
				continue
			}
			var settled bool
			if err := conn.QueryRow(d.ctx, `SELECT EXISTS (SELECT FROM charges WHERE subscription_id = $1 AND period_key = $2 AND status = 'succeeded')
				AND NOT EXISTS (SELECT FROM charges WHERE subscription_id = $1 AND in_flight)`, s.id, key).Scan(&settled); err != nil {
				d.fatalf("read the primary's charges: %v", err)
			}
			if settled {
				chosen = append(chosen, s)
			}
		}
		return len(chosen) == want
	})
	for i, s := range chosen {
		u := update{sub: s.id, amount: s.amount + 500, idem: fmt.Sprintf("drill-update-%d-%s", d.plan.seed, s.id)}
		u.body = map[string]any{"amount": u.amount, "effective": "now", "proration": "charge_now"}
		d.call(i, http.MethodPost, "/v1/subscriptions/"+s.id.String()+"/update", u.idem, u.body, nil)
		d.updates = append(d.updates, u)
	}
	d.fig.UpdatesAsked = len(d.updates)
}

// resendUpdates is the client sending every update again under its
// Idempotency-Key after the failover (the restore), once the period it
// prorated is billed and settled again: the clock stands where it stood
// when the update was first sent, so a change the database lost is made
// again with the same share of the period, the same id (derived from the
// key) and so the same adjustment charge.
func (d *drill) resendUpdates(periodKey string) {
	for i, u := range d.updates {
		d.waitFor("the prorated period's charge to settle before the update is sent again", 60*time.Second, func() bool {
			var settled bool
			d.replicaQuery2(`SELECT EXISTS (SELECT FROM charges WHERE subscription_id = $1 AND period_key = $2)
				AND NOT EXISTS (SELECT FROM charges WHERE subscription_id = $1 AND in_flight)`, &settled, u.sub, periodKey)
			return settled
		})
		var n int
		d.replicaQuery2(`SELECT count(*) FROM subscription_changes WHERE subscription_id = $1`, &n, u.sub)
		if n == 0 {
			d.fig.UpdatesLost++
		}
		d.call(i, http.MethodPost, "/v1/subscriptions/"+u.sub.String()+"/update", u.idem, u.body, nil)
		d.fig.UpdatesResent++
	}
}

// waitAutopay waits (up to a minute) until every bill is paid and every
// posting has its final word: the registry holding no payment accepted
// whose fine was not captured. What is left then is the judge's.
func (d *drill) waitAutopay() {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var unpaid, open int
		d.replicaQuery2(`SELECT count(*) FROM enrollments e WHERE e.id = ANY($1)
			AND NOT EXISTS (SELECT FROM bills b WHERE b.enrollment_id = e.id AND b.status = 'paid')`, &unpaid, d.enrollmentIDs())
		d.replicaQuery(`SELECT count(*) FROM registry_postings WHERE status IN ('posting', 'abandoned')`, &open)
		_, captured := d.fineOps()
		dangling := 0
		for _, e := range d.registry.Ledger() {
			if e.Status == "accepted" && captured[d.fineKey(e.UIN)] == 0 {
				dangling++
			}
		}
		if unpaid == 0 && open == 0 && dangling == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *drill) enrollmentIDs() []uuid.UUID {
	out := make([]uuid.UUID, len(d.enrs))
	for i, e := range d.enrs {
		out[i] = e.id
	}
	return out
}

// fineKey is the charge key of the fine uin.
func (d *drill) fineKey(uin string) string {
	for _, e := range d.enrs {
		if e.kind == "fines" && e.bill == uin {
			return e.key()
		}
	}
	return ""
}

// judgeAutopay holds the registry's book and the gateway's against the
// bills: each bill captured exactly once; a captured fine has a payment
// accepted at the registry; an accepted payment whose fine was not
// captured is annulled; no UIN is paid twice at the registry, and no
// payment names a UIN the drill did not bill; the promoted database
// holds each bill paid.
func (d *drill) judgeAutopay(captured map[string]int) {
	d.waitAutopay()
	held, fineCaptures := d.fineOps()
	d.fig.FinesHeld = len(held)
	ledger := d.registry.Ledger()
	accepted := map[string][]agentfake.Entry{}
	for _, x := range ledger {
		d.fig.FinesPosted++
		switch x.Status {
		case "annulled":
			d.fig.PostingsAnnulled++
		case "accepted":
			accepted[x.UIN] = append(accepted[x.UIN], x)
		default:
			d.failures = append(d.failures, fmt.Sprintf("registry payment %s of %s still %s after settling", x.PaymentID, x.UIN, x.Status))
		}
		if d.fineKey(x.UIN) == "" {
			d.failures = append(d.failures, fmt.Sprintf("registry payment %s names %s, which no fine of the drill has", x.PaymentID, x.UIN))
		}
	}
	for _, e := range d.enrs {
		n := captured[e.key()]
		switch {
		case n == 1 && e.kind == "fines":
			d.fig.FinesCaptured++
		case n == 1:
			d.fig.HousingCaptured++
		default:
			d.failures = append(d.failures, fmt.Sprintf("%s bill %s of enrollment %s captured %d times at the gateway, owed once", e.kind, e.bill, e.id, n))
		}
		var status string
		d.replicaQuery2(`SELECT coalesce((SELECT status FROM bills WHERE enrollment_id = $1 AND bill_id = $2), 'missing')`, &status, e.id, e.bill)
		if status != "paid" {
			d.failures = append(d.failures, fmt.Sprintf("%s bill %s of enrollment %s is %s after settling", e.kind, e.bill, e.id, status))
		}
		if e.kind != "fines" {
			continue
		}
		got := accepted[e.bill]
		switch {
		case fineCaptures[e.key()] > 0 && len(got) == 0:
			d.failures = append(d.failures, fmt.Sprintf("fine %s captured at the gateway without a payment accepted at the registry", e.bill))
		case fineCaptures[e.key()] == 0 && len(got) > 0:
			d.failures = append(d.failures, fmt.Sprintf("fine %s not captured, its payment %s accepted at the registry and not annulled", e.bill, got[0].PaymentID))
		case len(got) > 1:
			ids := make([]string, len(got))
			for i, x := range got {
				ids[i] = x.PaymentID
			}
			d.failures = append(d.failures, fmt.Sprintf("fine %s paid %d times at the registry: %s", e.bill, len(got), strings.Join(ids, ", ")))
		}
		if len(got) == 1 && got[0].Amount != 50000 {
			d.failures = append(d.failures, fmt.Sprintf("fine %s: the registry accepted %d, its discounted price is 50000", e.bill, got[0].Amount))
		}
	}
}

// judgeUpdates holds each update against the books: the promoted
// database holds one change of the subscription, at the new price, and
// the gateway captured its one adjustment charge once.
func (d *drill) judgeUpdates(captured map[string]int) {
	for _, u := range d.updates {
		var changes int
		var amount int64
		d.replicaQuery2(`SELECT count(*) FROM subscription_changes WHERE subscription_id = $1`, &changes, u.sub)
		d.replicaQuery2(`SELECT amount FROM subscriptions WHERE id = $1`, &amount, u.sub)
		if changes != 1 || amount != u.amount {
			d.failures = append(d.failures, fmt.Sprintf("subscription %s updated to %d: %d changes recorded, amount %d", u.sub, u.amount, changes, amount))
		}
		adjustments := 0
		prefix := u.sub.String() + ":"
		for key, n := range captured {
			if strings.HasPrefix(key, prefix) && strings.Contains(key, ":adj:") {
				adjustments++
				d.fig.AdjustmentsCaptured += n
			}
		}
		if adjustments != 1 {
			d.failures = append(d.failures, fmt.Sprintf("subscription %s updated once with charge_now: %d adjustment charges captured at the gateway", u.sub, adjustments))
		}
	}
}

// autopayLoad is how many fines and housing bills fall due in a drill of
// subs subscriptions.
func autopayLoad(subs int) (fines, housing int) {
	return max(4, subs/10), 1 + subs/60
}
