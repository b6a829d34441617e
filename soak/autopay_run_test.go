package soak_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/rebill/rebill/audit/billcheck"
	"github.com/rebill/rebill/soak"
)

// runAutopay executes an autopay step through the API, as a payer, an
// issuer (pushes, withdrawals) and the dev bill sources would.
func (r *runner) runAutopay(step soak.Step) {
	r.obsMu.Lock()
	now := r.devNow
	id := r.enrIDs[step.Enr]
	if step.Kind == soak.KindEnrol {
		r.enrSteps[step.Enr] = step
	}
	enr := r.enrSteps[step.Enr]
	r.obsMu.Unlock()
	if step.Kind != soak.KindEnrol && step.Kind != soak.KindRegistryFault && id == "" {
		return // its enrollment was not created
	}
	var a answer
	var ok bool
	switch step.Kind {
	case soak.KindEnrol:
		var ref any = step.Account
		if step.EnrKind == "fines" {
			ref = map[string]any{"sts": step.Account}
		}
		a, ok = r.post(step, "/v1/enrollments", map[string]any{"customer_id": step.Customer, "kind": step.EnrKind,
			"account_ref": ref, "currency": "RUB", "max_amount": step.MaxAmount, "payment_method": cardBody(*step.Card)})
		var e struct {
			ID string `json:"id"`
		}
		if ok && a.status == http.StatusCreated && a.decode(&e) == nil {
			r.obsMu.Lock()
			r.enrIDs[step.Enr] = e.ID
			r.obsMu.Unlock()
		}
	case soak.KindBill:
		body := map[string]any{"bill_id": step.BillID, "amount": step.BillAmount,
			"issued_at": now.Add(-time.Duration(step.IssuedAgo) * 24 * time.Hour).UTC().Format(time.RFC3339),
			"due_date":  moscowDate(now, step.DueIn)}
		if step.Discounted > 0 {
			body["discounted_amount"], body["discount_deadline"] = step.Discounted, moscowDate(now, step.DiscountIn)
		}
		path := "/v1/enrollments/" + id + "/bills"
		if step.Pull {
			path = "/v1/dev/bill-sources/" + enr.EnrKind + "/bills"
			var ref any = enr.Account
			if enr.EnrKind == "fines" {
				ref = map[string]any{"sts": enr.Account}
			}
			body["account_ref"] = ref
		}
		a, ok = r.post(step, path, body)
	case soak.KindWithdraw:
		a, ok = r.post(step, "/v1/enrollments/"+id+"/bills/"+step.BillID+"/withdraw", map[string]any{})
	case soak.KindEnrolAction:
		path := "/v1/enrollments/" + id + "/" + step.Action
		if step.Action == "confirm" {
			path = "/v1/enrollments/" + id + "/bills/" + step.BillID + "/confirm"
		}
		a, ok = r.post(step, path, map[string]any{})
	case soak.KindEnrolCard:
		a, ok = r.post(step, "/v1/enrollments/"+id+"/payment-method", cardBody(*step.Card))
	case soak.KindRegistryFault:
		a, ok = r.request(step.Node, http.MethodPost, "/v1/dev/registry/"+step.Gateway+"/faults", r.idem(step, ""),
			map[string]any{"down": *step.Down}, 60*time.Second)
	}
	if !ok || a.status >= 500 {
		r.note("step %d (%s): %d %s", step.N, step, a.status, a.body)
	}
}

// moscowDate is the Moscow date days after now.
func moscowDate(now time.Time, days int) string {
	msk := time.FixedZone("MSK", 3*3600)
	return now.In(msk).AddDate(0, 0, days).Format(time.DateOnly)
}

// collectBills reads what package billcheck judges: every enrollment, bill,
// bill charge and registry posting (with the registry's own book's
// status), and the gateways' operations of bill charges, which it takes
// out of d.Ledger (the subscriptions' invariants judge periods).
func (r *runner) collectBills(d *soak.Data) *billcheck.Data {
	t := r.t
	b := &billcheck.Data{Now: d.Now, AnnulWithin: 24 * time.Hour}
	q := func(sql string, scan func(rows interface{ Scan(...any) error }) error) {
		rows, err := r.db.Query(r.ctx, sql)
		if err != nil {
			t.Fatalf("collect bills: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatalf("collect bills: %v", err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("collect bills: %v", err)
		}
	}
	q(`SELECT id::text, customer_id, kind, coalesce(els, ''), max_amount FROM enrollments ORDER BY id`, func(row interface{ Scan(...any) error }) error {
		var e billcheck.Enrollment
		err := row.Scan(&e.ID, &e.CustomerID, &e.Kind, &e.ELS, &e.MaxAmount)
		b.Enrollments = append(b.Enrollments, e)
		return err
	})
	q(`SELECT id::text, enrollment_id::text, bill_id, amount, discounted_amount,
			(discount_deadline + 1)::timestamp AT TIME ZONE 'Europe/Moscow', expires_at, status, confirmed_at, coalesce(charge_id::text, '')
		FROM bills ORDER BY id`, func(row interface{ Scan(...any) error }) error {
		var x billcheck.Bill
		err := row.Scan(&x.ID, &x.EnrollmentID, &x.BillID, &x.Amount, &x.DiscountedAmount, &x.DiscountEnds, &x.ExpiresAt, &x.Status,
			&x.ConfirmedAt, &x.ChargeID)
		b.Bills = append(b.Bills, x)
		return err
	})
	keys := map[string]bool{}
	q(`SELECT id::text, enrollment_id::text, period_key, status, attempt_count, attempt_times, updated_at FROM charges
		WHERE enrollment_id IS NOT NULL ORDER BY id`, func(row interface{ Scan(...any) error }) error {
		var c billcheck.Charge
		err := row.Scan(&c.ID, &c.EnrollmentID, &c.BillID, &c.Status, &c.AttemptCount, &c.AttemptTimes, &c.UpdatedAt)
		b.Charges = append(b.Charges, c)
		keys[c.Key()] = true
		return err
	})
	q(`SELECT p.payment_id, p.charge_id::text, p.attempt, p.uin, p.amount, p.status, coalesce(l.status, '')
		FROM registry_postings p LEFT JOIN dev_registry_ledger l ON l.payment_id = p.payment_id ORDER BY p.payment_id`,
		func(row interface{ Scan(...any) error }) error {
			var p billcheck.Posting
			err := row.Scan(&p.PaymentID, &p.ChargeID, &p.Attempt, &p.UIN, &p.Amount, &p.Status, &p.RegistryStatus)
			b.Postings = append(b.Postings, p)
			return err
		})
	periods := d.Ledger[:0]
	for _, o := range d.Ledger {
		if k := o.ChargeKey(); keys[k] {
			b.Ops = append(b.Ops, billcheck.Op{Gateway: o.Gateway, Op: o.Op, IdempotencyKey: o.IdempotencyKey, Status: o.Status,
				Amount: o.Amount, At: o.At})
			continue
		}
		periods = append(periods, o)
	}
	d.Ledger = periods
	return b
}

// billViolations judges the bills as the soak's violations.
func billViolations(b *billcheck.Data) []soak.Violation {
	var out []soak.Violation
	for _, v := range billcheck.Check(b) {
		out = append(out, soak.Violation{Invariant: v.Invariant, Subscription: "enrollment " + v.Enrollment, Charge: v.Charge,
			Detail: fmt.Sprintf("bill %q: %s", v.Bill, v.Detail)})
	}
	return out
}
