package soak_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rebill/rebill/experiments"
	"github.com/rebill/rebill/soak"
)

// experimentViolations checks the experiment records the run left: every
// subscription's arm is the one the hash picks (the nodes, killed and
// restarted, agreed), and every charge carries its subscription's arms.
// It also returns how many charges were in a treatment arm, which the
// summary reports: a run in which no charge took one tests nothing.
func (r *runner) experimentViolations() ([]soak.Violation, int) {
	set, err := experiments.Parse([]byte(soakExperiments), experiments.Limits{DunningMax: 720 * time.Hour, MaxAttempts: 15})
	if err != nil {
		return []soak.Violation{{Invariant: "experiment-record", Detail: err.Error()}}, 0
	}
	var out []soak.Violation
	ctx := context.Background()
	rows, err := r.db.Query(ctx, `SELECT id::text, experiments FROM subscriptions WHERE experiments <> '{}'`)
	if err != nil {
		return []soak.Violation{{Invariant: "experiment-record", Detail: err.Error()}}, 0
	}
	for rows.Next() {
		var id string
		var rec map[string]string
		if err := rows.Scan(&id, &rec); err != nil {
			rows.Close()
			return []soak.Violation{{Invariant: "experiment-record", Detail: err.Error()}}, 0
		}
		for key, arm := range rec {
			e, ok := set.Get(key)
			if want := experiments.Bucket(e, id); !ok || arm != want {
				out = append(out, soak.Violation{Invariant: "experiment-arm-is-the-hash", Subscription: id,
					Detail: fmt.Sprintf("%s: recorded %q, the hash picks %q", key, arm, want)})
			}
		}
	}
	rows.Close()
	rows, err = r.db.Query(ctx, `SELECT c.id::text, c.subscription_id::text, c.experiments::text, s.experiments::text
		FROM charges c JOIN subscriptions s ON s.id = c.subscription_id
		WHERE c.experiments <> '{}' AND NOT (s.experiments @> c.experiments)`)
	if err != nil {
		return []soak.Violation{{Invariant: "experiment-record", Detail: err.Error()}}, 0
	}
	for rows.Next() {
		var charge, sub, got, want string
		if err := rows.Scan(&charge, &sub, &got, &want); err != nil {
			break
		}
		out = append(out, soak.Violation{Invariant: "experiment-charge-carries-its-subscriptions-arm", Subscription: sub, Charge: charge,
			Detail: fmt.Sprintf("charge %s, subscription %s", got, want)})
	}
	rows.Close()
	var treated int
	if err := r.db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE experiments->>'soak-dunning' = 'short'
		OR experiments->>'soak-timeout' = 'patient'`).Scan(&treated); err != nil {
		out = append(out, soak.Violation{Invariant: "experiment-record", Detail: err.Error()})
	}
	return out, treated
}
