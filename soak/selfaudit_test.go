package soak_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rebill/rebill/soak"
)

// selfAudit runs the built binary's `rebill audit --json` over every dev
// day of the run, as an operator would, and turns each discrepancy it
// lists into a violation of the invariant "self-audit": rebill's own
// check of its books must agree with the soak's.
func (r *runner) selfAudit(from, to time.Time) []soak.Violation {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, "audit", "--json",
		"--from", from.UTC().Format(time.DateOnly), "--to", to.UTC().Format(time.DateOnly))
	cmd.Dir = r.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REBILL_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range r.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1) {
		return []soak.Violation{{Invariant: "self-audit", Detail: fmt.Sprintf("rebill audit failed: %v: %s", err, tail(stderr.String()))}}
	}
	var report struct {
		Periods       int `json:"periods"`
		Discrepancies []struct {
			Kind      string `json:"kind"`
			ChargeKey string `json:"charge_key"`
			Detail    string `json:"detail"`
		} `json:"discrepancies"`
	}
	if jerr := json.Unmarshal([]byte(stdout.String()), &report); jerr != nil {
		return []soak.Violation{{Invariant: "self-audit", Detail: fmt.Sprintf("rebill audit printed no report (%v): %s", jerr, tail(stderr.String()))}}
	}
	if err == nil && len(report.Discrepancies) > 0 || err != nil && len(report.Discrepancies) == 0 {
		return []soak.Violation{{Invariant: "self-audit", Detail: fmt.Sprintf("rebill audit exited %v with %d discrepancies", err, len(report.Discrepancies))}}
	}
	r.note("self-audit: %d periods, %d discrepancies", report.Periods, len(report.Discrepancies))
	var out []soak.Violation
	for _, d := range report.Discrepancies {
		sub, _, _ := strings.Cut(d.ChargeKey, ":")
		out = append(out, soak.Violation{Invariant: "self-audit", Subscription: sub, Charge: d.ChargeKey, Detail: d.Kind + ": " + d.Detail})
	}
	return out
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}
