package soak_test

import (
	"fmt"
	"net/http"
	"strings"
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
	if step.Kind != soak.KindEnrol && step.Kind != soak.KindRegistryFault && step.Kind != soak.KindZhkhFault &&
		step.Kind != soak.KindPaidElsewhere && id == "" {
		return // its enrollment was not created
	}
	var a answer
	var ok bool
	switch step.Kind {
	case soak.KindEnrol:
		r.enrol(step)
		return
	case soak.KindClockTo:
		r.clockTo(step, id)
		return
	case soak.KindBill:
		body := map[string]any{"bill_id": step.BillID, "amount": step.BillAmount,
			"issued_at": now.Add(-time.Duration(step.IssuedAgo) * 24 * time.Hour).UTC().Format(time.RFC3339),
			"due_date":  moscowDate(now, step.DueIn)}
		if step.Discounted > 0 {
			body["discounted_amount"], body["discount_deadline"] = step.Discounted, moscowDate(now, step.DiscountIn)
		}
		for field, v := range map[string]string{"payment_document_id": step.PaymentDocumentID, "service_id": step.ServiceID,
			"period": step.Period, "supplier_inn": step.SupplierINN} {
			if v != "" {
				body[field] = v
			}
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
		if step.Action == "cancel" {
			r.obsMu.Lock()
			if e := r.enrolled[id]; e != nil {
				e.cancelSent = true
			}
			r.obsMu.Unlock()
		}
		path := "/v1/enrollments/" + id + "/" + step.Action
		if step.Action == "confirm" {
			path = "/v1/enrollments/" + id + "/bills/" + step.BillID + "/confirm"
		}
		a, ok = r.post(step, path, map[string]any{})
	case soak.KindEnrolCard:
		a, ok = r.post(step, "/v1/enrollments/"+id+"/payment-method", cardBody(*step.Card))
	case soak.KindRegistryFault, soak.KindZhkhFault:
		body := map[string]any{}
		if step.Down != nil {
			body["down"] = *step.Down
		}
		if step.ErrorRate != nil {
			body["error_rate"] = *step.ErrorRate
		}
		if step.LoseResponse != nil {
			body["lose_response"] = *step.LoseResponse
		}
		if step.Processing != nil {
			body["processing"] = *step.Processing
		}
		if step.AnnulUnanswered != nil {
			body["annul_unanswered"] = *step.AnnulUnanswered
		}
		path := "/v1/dev/registry/" + step.Gateway + "/faults"
		if step.Kind == soak.KindZhkhFault {
			path = "/v1/dev/zhkh/" + step.Gateway + "/faults"
		}
		a, ok = r.request(step.Node, http.MethodPost, path, r.idem(step, ""), body, 60*time.Second)
	case soak.KindPaidElsewhere:
		a, ok = r.post(step, "/v1/dev/registry/paid", map[string]any{"uin": step.BillID, "amount": step.PaidAmount})
		if ok && a.status != http.StatusCreated {
			r.note("step %d (%s): %d %s", step.N, step, a.status, a.body)
		}
	}
	if !ok || a.status >= 500 {
		r.note("step %d (%s): %d %s", step.N, step, a.status, a.body)
	}
}

// enrolledAccount is what the driver knows of an enrollment rebill
// created: whose, of what, and whether a cancel of it was ever sent.
type enrolledAccount struct {
	customer, kind, account string
	answered                time.Time
	cancelSent              bool
}

// enrol creates an enrollment. A customer enrolling again, while not
// cancelled, the same kind and account (its Latin look-alike letters and
// their Cyrillic form being one account) gets 409 enrollment-exists naming
// the one they have, and the schedule's later steps for this enrollment
// act on that one; two customers enrolling one account both get theirs
// (and a bill of it is paid once: billcheck). What the driver can be sure
// of is judged as the invariant "enrollment-exists": a 201 for an account
// the customer already had enrolled before this request was sent, and
// never sent a cancel for; a 409 naming an enrollment of another customer
// or account.
func (r *runner) enrol(step soak.Step) {
	var ref any = step.Account
	if step.EnrKind == "fines" {
		ref = map[string]any{"sts": step.Account}
	}
	sent := time.Now()
	r.obsMu.Lock()
	var had []string
	for id, e := range r.enrolled {
		if e.customer == step.Customer && e.kind == step.EnrKind && e.account == canonicalAccount(step.Account) &&
			!e.cancelSent && e.answered.Before(sent) {
			had = append(had, id)
		}
	}
	r.obsMu.Unlock()
	a, ok := r.post(step, "/v1/enrollments", map[string]any{"customer_id": step.Customer, "kind": step.EnrKind,
		"account_ref": ref, "currency": "RUB", "max_amount": step.MaxAmount, "payment_method": cardBody(*step.Card)})
	if !ok {
		r.note("step %d (%s): no answer", step.N, step)
		return
	}
	var e struct {
		ID           string `json:"id"`
		EnrollmentID string `json:"enrollment_id"`
	}
	_ = a.decode(&e)
	r.obsMu.Lock()
	defer r.obsMu.Unlock()
	switch {
	case a.status == http.StatusCreated && e.ID != "":
		r.enrIDs[step.Enr] = e.ID
		if r.enrolled[e.ID] == nil {
			r.enrolled[e.ID] = &enrolledAccount{customer: step.Customer, kind: step.EnrKind, account: canonicalAccount(step.Account),
				answered: time.Now()}
		}
		if len(had) > 0 {
			r.driverViolations = append(r.driverViolations, soak.Violation{Invariant: "enrollment-exists",
				Subscription: "enrollment " + e.ID, Detail: fmt.Sprintf("step %d (%s): 201 although %s already had enrollment %s of %s, never cancelled",
					step.N, step, step.Customer, strings.Join(had, ", "), step.Account)})
		}
	case a.status == http.StatusConflict && a.problemType() == "enrollment-exists":
		r.enrIDs[step.Enr] = e.EnrollmentID
		if x := r.enrolled[e.EnrollmentID]; x != nil && (x.customer != step.Customer || x.kind != step.EnrKind ||
			x.account != canonicalAccount(step.Account)) {
			r.driverViolations = append(r.driverViolations, soak.Violation{Invariant: "enrollment-exists",
				Subscription: "enrollment " + e.EnrollmentID, Detail: fmt.Sprintf("step %d (%s): 409 names enrollment %s of %s, %s %s",
					step.N, step, e.EnrollmentID, x.customer, x.kind, x.account)})
		}
	default:
		if a.status >= 500 {
			r.note("step %d (%s): %d %s", step.N, step, a.status, a.body)
		}
	}
}

// canonicalAccount is an account with its Latin look-alike capitals in
// Cyrillic, as rebill stores it.
func canonicalAccount(account string) string { return soak.Cyrillic(strings.ToUpper(account)) }

// clockTo moves the dev clock to a moment of a bill, read from rebill's
// database (the generator cannot know when a bill reached rebill): the end
// of its discount or its last moment for an attempt, plus the step's
// offset. Nothing when that moment has passed, or is more than 60 days
// ahead.
func (r *runner) clockTo(step soak.Step, enrollment string) {
	var target, now *time.Time
	err := r.db.QueryRow(r.ctx, `SELECT CASE $3 WHEN 'discount-ends' THEN (discount_deadline + 1)::timestamp AT TIME ZONE 'Europe/Moscow'
			ELSE expires_at - interval '1 hour' END, (SELECT now FROM dev_clock)
		FROM bills WHERE enrollment_id = $1::uuid AND bill_id = $2`, enrollment, step.BillID, step.Target).Scan(&target, &now)
	if err != nil || target == nil || now == nil {
		return
	}
	by := target.Add(time.Duration(step.Offset) * time.Second).Sub(*now)
	if by <= 0 || by > 60*24*time.Hour {
		return
	}
	r.obsMu.Lock()
	r.clockTargets++
	r.obsMu.Unlock()
	r.advance(step.Node, by.String(), r.idem(step, ""))
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
	// The simulated gateways stamp the dev clock.
	b := &billcheck.Data{Now: d.Now, AnnulWithin: 24 * time.Hour, OpsOnServiceClock: true}
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
	q(`SELECT id::text, enrollment_id::text, period_key, status, attempt_count, attempt_times, updated_at, paid_outside,
			hold_released_at IS NOT NULL FROM charges
		WHERE enrollment_id IS NOT NULL ORDER BY id`, func(row interface{ Scan(...any) error }) error {
		var c billcheck.Charge
		err := row.Scan(&c.ID, &c.EnrollmentID, &c.BillID, &c.Status, &c.AttemptCount, &c.AttemptTimes, &c.UpdatedAt, &c.PaidOutside, &c.HoldReleased)
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
			d.BillLedger = append(d.BillLedger, o)
			continue
		}
		periods = append(periods, o)
	}
	d.Ledger = periods
	return b
}

// collectFines reads what the checks of payments made outside rebill
// judge: every fine of b's bills with its copies, its holds and captures
// out of b.Ops, and the registry's book of its UIN (the simulated book,
// in the order written, rebill's postings named by charge and attempt).
func (r *runner) collectFines(b *billcheck.Data) []soak.Fine {
	kinds := map[string]string{}
	for _, e := range b.Enrollments {
		kinds[e.ID] = e.Kind
	}
	charges := map[string]billcheck.Charge{}
	for _, c := range b.Charges {
		charges[c.ID] = c
	}
	postings := map[string]string{} // charge id and attempt -> status
	for _, p := range b.Postings {
		postings[p.ChargeID+"#"+fmt.Sprint(p.Attempt)] = p.Status
	}
	byUIN := map[string]*soak.Fine{}
	var uins []string
	for _, x := range b.Bills {
		if kinds[x.EnrollmentID] != "fines" {
			continue
		}
		f := byUIN[x.BillID]
		if f == nil {
			f = &soak.Fine{UIN: x.BillID, Amount: x.Amount, DiscountedAmount: x.DiscountedAmount, DiscountEnds: x.DiscountEnds}
			byUIN[x.BillID] = f
			uins = append(uins, x.BillID)
		}
		fb := soak.FineBill{EnrollmentID: x.EnrollmentID, Status: x.Status}
		if c, ok := charges[x.ChargeID]; ok {
			fb.ChargeKey, fb.ChargeStatus, fb.Attempt = c.Key(), c.Status, c.AttemptCount
			fb.Posting = postings[c.ID+"#"+fmt.Sprint(c.AttemptCount)]
		}
		f.Bills = append(f.Bills, fb)
	}
	uinOf := map[string]string{} // charge key -> UIN
	for _, c := range b.Charges {
		if byUIN[c.BillID] != nil && kinds[c.EnrollmentID] == "fines" {
			uinOf[c.Key()] = c.BillID
		}
	}
	for _, o := range b.Ops {
		key, attempt, op, ok := billcheck.SplitGatewayKey(o.IdempotencyKey)
		f := byUIN[uinOf[key]]
		if !ok || f == nil || o.Status != "succeeded" {
			continue
		}
		x := soak.FineOp{ChargeKey: key, Attempt: attempt, Amount: o.Amount, At: o.At}
		switch op {
		case "authorize":
			f.Holds = append(f.Holds, x)
		case "capture":
			f.Captures = append(f.Captures, x)
		}
	}
	rows, err := r.db.Query(r.ctx, `SELECT l.seq, l.payment_id, l.gateway, l.uin, l.amount, l.status, l.at,
			coalesce(c.enrollment_id::text || ':' || c.period_key, ''), coalesce(p.attempt, 0)
		FROM dev_registry_ledger l LEFT JOIN registry_postings p ON p.payment_id = l.payment_id
			LEFT JOIN charges c ON c.id = p.charge_id ORDER BY l.seq`)
	if err != nil {
		r.t.Fatalf("collect fines: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e soak.BookEntry
		var uin string
		if err := rows.Scan(&e.Seq, &e.PaymentID, &e.Gateway, &uin, &e.Amount, &e.Status, &e.At, &e.ChargeKey, &e.Attempt); err != nil {
			r.t.Fatalf("collect fines: %v", err)
		}
		e.At = e.At.UTC()
		if f := byUIN[uin]; f != nil {
			f.Book = append(f.Book, e)
		}
	}
	if err := rows.Err(); err != nil {
		r.t.Fatalf("collect fines: %v", err)
	}
	out := make([]soak.Fine, 0, len(uins))
	for _, u := range uins {
		out = append(out, *byUIN[u])
	}
	return out
}

// fineCounts is how much of the fines was paid outside rebill, for a
// schedule's summary.
func fineCounts(fines []soak.Fine) map[string]int {
	out := map[string]int{"fines": len(fines)}
	for _, f := range fines {
		outside, captured := false, len(f.Captures) > 0
		for _, e := range f.Book {
			if e.Outside() {
				out["outside_payments"]++
				outside = true
			}
		}
		if outside {
			out["fines_paid_outside"]++
		}
		if outside && captured {
			out["fines_paid_outside_and_captured"]++
		}
		for _, b := range f.Bills {
			if b.Status == "paid_elsewhere" {
				out["bills_paid_elsewhere"]++
			}
		}
	}
	return out
}

// postingCounts is how often a schedule's registry faults made rebill
// abandon a posting (and settle it: annulled or failed on the registry's
// word) or find a payment annulled at the registry, for its summary.
func (r *runner) postingCounts() map[string]int {
	var abandoned, settled, foundAnnulled int
	if err := r.db.QueryRow(r.ctx, `SELECT count(*) FILTER (WHERE status = 'abandoned'),
			count(*) FILTER (WHERE last_error LIKE 'abandoned%'),
			count(*) FILTER (WHERE status = 'annulled' AND last_error LIKE '%registry holds the payment annulled%')
		FROM registry_postings`).Scan(&abandoned, &settled, &foundAnnulled); err != nil {
		r.t.Errorf("count postings: %v", err)
	}
	return map[string]int{"abandoned_left": abandoned, "abandoned_settled": settled, "found_annulled": foundAnnulled}
}

// billCounts is how much autopay a schedule did, for its summary.
func billCounts(b *billcheck.Data) map[string]any {
	statuses := map[string]int{}
	for _, x := range b.Bills {
		statuses[x.Status]++
	}
	captures, postings := 0, map[string]int{}
	for _, o := range b.Ops {
		if o.Op == "capture" && o.Status == "succeeded" {
			captures++
		}
	}
	for _, p := range b.Postings {
		postings[p.Status]++
	}
	customers := map[string]bool{}
	for _, e := range b.Enrollments {
		customers[e.CustomerID] = true
	}
	return map[string]any{"enrollments": len(b.Enrollments), "customers": len(customers), "bills": len(b.Bills),
		"bills_by_status": statuses, "charges": len(b.Charges), "captures": captures, "postings": len(b.Postings),
		"postings_by_status": postings}
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
