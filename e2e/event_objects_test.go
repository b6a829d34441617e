package e2e_test

import (
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
)

// eventCoverage collects the event types whose objects a test compared.
type eventCoverage struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (c *eventCoverage) add(typ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[typ] = true
}

// eventObjects checks, for one node, that every event shows its object as
// the object's GET returned it when the change committed: as the response
// of the request that caused the event, and as a GET right after.
type eventObjects struct {
	b        testBundle
	coverage *eventCoverage
}

// newest is the id of the newest event, "" when there is none: the events
// a request causes are newer.
func (o eventObjects) newest(t *testing.T) string {
	t.Helper()
	data := o.b.call(t, http.MethodGet, "/v1/events?limit=1", nil)["data"].([]any)
	if len(data) == 0 {
		return ""
	}
	return data[0].(map[string]any)["id"].(string)
}

// eventsOf lists the events of object (or of its children) newer than
// after, oldest first.
func (o eventObjects) eventsOf(t *testing.T, object, after string) []map[string]any {
	t.Helper()
	// Event ids are derived from their facts, not in creation order: the
	// log, newest first, says which came after.
	newer := map[string]bool{}
	for _, e := range o.b.call(t, http.MethodGet, "/v1/events?limit=100", nil)["data"].([]any) {
		id := e.(map[string]any)["id"].(string)
		if id == after {
			break
		}
		newer[id] = true
	}
	data := o.b.call(t, http.MethodGet, "/v1/events?limit=100&object_id="+object, nil)["data"].([]any)
	var out []map[string]any
	for i := len(data) - 1; i >= 0; i-- {
		e := data[i].(map[string]any)
		if newer[e["id"].(string)] {
			out = append(out, e)
		}
	}
	return out
}

// request sends a request and requires that, of the events it caused, those
// of the object it answers with are exactly types (in that order), each
// carrying the response body as its object, and that a GET of the object
// right after answers the same. A nil get skips that GET: background work
// the request started moves the object on at once (the dev clock stands
// still, so its updated_at does not tell). It returns the response.
func (o eventObjects) request(t *testing.T, method, path string, body any, get func(id string) map[string]any,
	types ...string) map[string]any {
	t.Helper()
	mark := o.newest(t)
	res := o.b.call(t, method, path, body)
	id := res["id"].(string)
	var got []string
	for _, e := range o.eventsOf(t, id, mark) {
		object := e["data"].(map[string]any)["object"].(map[string]any)
		if object["id"] != id {
			continue // a child's event: charges are checked on their own
		}
		got = append(got, e["type"].(string))
		requireSameObject(t, res, object, "%s %s: the %s event's object against the response", method, path, e["type"])
		o.coverage.add(e["type"].(string))
	}
	require.Equal(t, types, got, "%s %s: the events of %s it caused", method, path, id)
	if get != nil {
		requireSameObject(t, res, get(id), "%s %s: the response against a GET right after", method, path)
	}
	return res
}

// settled waits for the newest event of type typ about object id (one
// background work caused) and requires its object to be what a GET of the
// object answers: the caller makes sure nothing changes it meanwhile.
func (o eventObjects) settled(t *testing.T, typ, id string, get func(id string) map[string]any,
	later ...func(event, got map[string]any)) {
	t.Helper()
	var event map[string]any
	require.Eventually(t, func() bool {
		data := o.b.call(t, http.MethodGet, "/v1/events?limit=1&type="+typ+"&object_id="+id, nil)["data"].([]any)
		if len(data) == 0 {
			return false
		}
		event = data[0].(map[string]any)
		return event["data"].(map[string]any)["object"].(map[string]any)["id"] == id
	}, 30*time.Second, 20*time.Millisecond, "a %s event of %s", typ, id)
	object, got := event["data"].(map[string]any)["object"].(map[string]any), get(id)
	for _, fn := range later {
		fn(object, got)
	}
	requireSameObject(t, got, object, "the %s event's object against a GET after the work committed", typ)
	o.coverage.add(typ)
}

// requireSameObject compares two JSON objects field by field. A bill's
// paid_by_enrollment_id is shown to staff only: an event, which a
// customer's webhook receives, leaves it out.
func requireSameObject(t *testing.T, want, got map[string]any, msg string, args ...any) {
	t.Helper()
	strip := func(m map[string]any) map[string]any {
		out := make(map[string]any, len(m))
		for k, v := range m {
			if k != "paid_by_enrollment_id" {
				out[k] = v
			}
		}
		return out
	}
	w, err := json.MarshalIndent(strip(want), "", " ")
	require.NoError(t, err)
	g, err := json.MarshalIndent(strip(got), "", " ")
	require.NoError(t, err)
	require.JSONEq(t, string(w), string(g), append([]any{msg}, args...)...)
}

func (o eventObjects) subscription(t *testing.T) func(string) map[string]any {
	return func(id string) map[string]any { return o.b.call(t, http.MethodGet, "/v1/subscriptions/"+id, nil) }
}

func (o eventObjects) charge(t *testing.T) func(string) map[string]any {
	return func(id string) map[string]any { return o.b.call(t, http.MethodGet, "/v1/charges/"+id, nil) }
}

func (o eventObjects) enrollment(t *testing.T) func(string) map[string]any {
	return func(id string) map[string]any { return o.b.call(t, http.MethodGet, "/v1/enrollments/"+id, nil) }
}

// bill reads a bill of enrollment (bills have no GET of their own: the
// enrollment's list shows them).
func (o eventObjects) bill(t *testing.T, enrollment string) func(string) map[string]any {
	return func(id string) map[string]any {
		for _, b := range o.b.bills(t, enrollment) {
			if b["id"] == id {
				return b
			}
		}
		t.Fatalf("bill %s not listed by enrollment %s", id, enrollment)
		return nil
	}
}

func cardExp(token string, month, year int) map[string]any {
	return map[string]any{"gateway": "sim1", "token": token, "exp_month": month, "exp_year": year}
}

// eventObjectExemptions are the event types no request of this test
// causes, with the reason; every other type of notify.Types is compared.
var eventObjectExemptions = map[string]string{
	"bill.awaiting_registry": "needs a production node without a payment registry: TestFineWaitsForARegistryThenIsPaidOnce " +
		"compares its object with the push's response",
}

// Every event shows its object as the object's GET answered it when the
// change committed (decision 21): the request that caused it answers the
// same object, and background work's events match a GET after it
// committed. Each event type is compared at least once.
func TestEventObjectsAreTheObjectsAsTheAPIAnswers(t *testing.T) {
	t.Parallel()
	coverage := &eventCoverage{seen: map[string]bool{}}
	t.Run("group", func(t *testing.T) {
		t.Run("subscription", func(t *testing.T) {
			t.Parallel()
			testSubscriptionEventObjects(t, eventObjects{b: setup(t, 1, nil), coverage: coverage})
		})
		t.Run("dunning", func(t *testing.T) {
			t.Parallel()
			testDunningEventObjects(t, eventObjects{b: setup(t, 1, nil), coverage: coverage})
		})
		t.Run("review", func(t *testing.T) {
			t.Parallel()
			testReviewEventObjects(t, eventObjects{b: setup(t, 1, map[string]string{"REBILL_UNAVAILABLE_FOR": "1ms"}), coverage: coverage})
		})
		t.Run("enrollment", func(t *testing.T) {
			t.Parallel()
			testEnrollmentEventObjects(t, eventObjects{b: setup(t, 1, nil), coverage: coverage})
		})
		t.Run("refund", func(t *testing.T) {
			t.Parallel()
			testRefundEventObjects(t, eventObjects{b: setup(t, 1, nil), coverage: coverage})
		})
		t.Run("trial", func(t *testing.T) {
			t.Parallel()
			testTrialEventObjects(t, eventObjects{b: setup(t, 1, nil), coverage: coverage})
		})
		t.Run("update", func(t *testing.T) {
			t.Parallel()
			testUpdateEventObjects(t, eventObjects{b: setup(t, 1, nil), coverage: coverage})
		})
	})
	if t.Failed() {
		return
	}
	// The types are the code's and the served contract's, which must agree.
	raw, err := os.ReadFile("../api/openapi.json")
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Schemas struct {
				EventType struct {
					Enum []string `json:"enum"`
				} `json:"EventType"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.ElementsMatch(t, notify.Types, doc.Components.Schemas.EventType.Enum, "notify.Types and the EventType enum")
	for typ := range eventObjectExemptions {
		require.Contains(t, notify.Types, typ, "an exemption names a known type")
	}
	var missing []string
	for _, typ := range notify.Types {
		if !coverage.seen[typ] && eventObjectExemptions[typ] == "" {
			missing = append(missing, typ)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "event types whose objects no test compared")
}

// A trial's notice and its end, both the scan's work, show the
// subscription as a GET answers after them: the end with its first period
// charged.
func testTrialEventObjects(t *testing.T, o eventObjects) {
	b := o.b
	body := subscriptionBody("tok_ok", "month")
	body["trial_period_days"] = 7
	sub := o.request(t, http.MethodPost, "/v1/subscriptions", body, o.subscription(t), "subscription.created")["id"].(string)
	b.advance(t, "100h")
	o.settled(t, "subscription.trial_will_end", sub, o.subscription(t))
	b.advance(t, "72h")
	b.waitCharges(t, sub, 1, "succeeded")
	o.settled(t, "subscription.trial_ended", sub, o.subscription(t), func(event, got map[string]any) {
		require.Equal(t, "active", event["status"])
		require.NotEqual(t, event["trial_end"], event["next_charge_at"], "shown with its first period charged")
	})
}

// An upgrade now shows the new price with its adjustment charge created;
// a change at period end shows it pending, its removal shows none, and a
// pending change applied by the scan shows the new terms with the
// boundary's period charged.
func testUpdateEventObjects(t *testing.T, o eventObjects) {
	b := o.b
	sub := o.request(t, http.MethodPost, "/v1/subscriptions", subscriptionBody("tok_ok", "month"), o.subscription(t),
		"subscription.created")["id"].(string)
	b.waitCharges(t, sub, 1, "succeeded")
	b.advance(t, "240h")
	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/update",
		map[string]any{"amount": 3000, "proration": "charge_now"}, o.subscription(t), "subscription.updated")
	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/update",
		map[string]any{"amount": 2000, "effective": "period_end"}, o.subscription(t), "subscription.update_scheduled")
	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pending_update/remove", map[string]any{}, o.subscription(t),
		"subscription.update_removed")
	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/update",
		map[string]any{"amount": 2500, "effective": "period_end"}, o.subscription(t), "subscription.update_scheduled")
	b.advance(t, "600h")
	require.Eventually(t, func() bool { return b.subscription(t, sub)["amount"] == float64(2500) }, 30*time.Second, 20*time.Millisecond,
		"the scan applies the pending change at the boundary")
	o.settled(t, "subscription.updated", sub, o.subscription(t), func(event, got map[string]any) {
		require.EqualValues(t, 2500, event["amount"], "the pending change applied")
		require.Nil(t, event["pending_update"])
	})
}

func testSubscriptionEventObjects(t *testing.T, o eventObjects) {
	b := o.b
	start := b.autopayStart(t)
	sub := o.request(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-events", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": cardExp("tok_ok", 12, 2035)}, o.subscription(t), "subscription.created")["id"].(string)
	first := b.waitCharges(t, sub, 1, "succeeded")[0]["id"].(string)
	o.settled(t, "charge.succeeded", first, o.charge(t))

	// A resume after the paid period ended starts a new period, charged in
	// the same transaction: the event shows the period advanced, as the
	// response does. Twice, as the second resume once showed the same gap.
	for i := 0; i < 2; i++ {
		o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/pause", map[string]any{}, o.subscription(t), "subscription.paused")
		b.advance(t, "960h")
		resumed := o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/resume", map[string]any{}, o.subscription(t),
			"subscription.resumed")
		require.True(t, mustTime(t, resumed["next_charge_at"]).After(b.clockNow(t)), "billed for the period the resume began")
		b.waitCharges(t, sub, 2+i, "succeeded")
	}

	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method",
		cardExp("tok_ok_visa", 12, 2036), o.subscription(t), "subscription.payment_method_updated")
	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{"at_period_end": true}, o.subscription(t),
		"subscription.cancel_scheduled")
	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/cancel", map[string]any{}, o.subscription(t), "subscription.cancelled")

	// Customer notices carry the subscription as it is when the scan
	// publishes them.
	month := b.clockNow(t).UTC()
	weekly := o.request(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-events", "amount": 700, "currency": "USD", "interval": "week", "timezone": "UTC",
		"payment_method": cardExp("tok_ok", int(month.Month()), month.Year())}, o.subscription(t), "subscription.created")["id"].(string)
	b.waitCharges(t, weekly, 1, "succeeded")
	b.scanNow(t)
	o.settled(t, "payment_method.expiring", weekly, o.subscription(t))
	b.advance(t, "100h")
	b.scanNow(t)
	o.settled(t, "charge.upcoming", weekly, o.subscription(t))
	_ = start
}

func testDunningEventObjects(t *testing.T, o eventObjects) {
	b := o.b
	b.autopayStart(t)
	// A soft decline: the charge waits for its retry, the subscription is
	// past due; a new card retries it, and its success reactivates it.
	sub := o.request(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-events", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": cardExp("tok_decline_funds", 12, 2035)}, nil, "subscription.created")["id"].(string)
	declined := b.waitCharges(t, sub, 1, "declined")[0]["id"].(string)
	o.settled(t, "charge.declined", declined, o.charge(t))
	o.settled(t, "subscription.past_due", sub, o.subscription(t))
	o.request(t, http.MethodPost, "/v1/subscriptions/"+sub+"/payment-method",
		cardExp("tok_ok", 12, 2036), nil, "subscription.payment_method_updated")
	b.waitCharges(t, sub, 1, "succeeded")
	o.settled(t, "subscription.reactivated", sub, o.subscription(t))

	// A hard decline: the charge fails, the subscription is unpaid; a new
	// card makes it past due in the request's one event.
	hard := o.request(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-events", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": cardExp("tok_decline_hard", 12, 2035)}, nil, "subscription.created")["id"].(string)
	failed := b.waitCharges(t, hard, 1, "failed")[0]["id"].(string)
	o.settled(t, "charge.failed", failed, o.charge(t))
	o.settled(t, "subscription.unpaid", hard, o.subscription(t))
	o.request(t, http.MethodPost, "/v1/subscriptions/"+hard+"/payment-method",
		cardExp("tok_decline_funds", 12, 2036), o.subscription(t),
		"subscription.payment_method_updated")
	again := b.waitCharges(t, hard, 1, "declined")[0]["id"].(string)

	// An immediate cancel voids the waiting charge in its transaction.
	o.request(t, http.MethodPost, "/v1/subscriptions/"+hard+"/cancel", map[string]any{}, o.subscription(t), "subscription.cancelled")
	o.settled(t, "charge.voided", again, o.charge(t))
}

func testReviewEventObjects(t *testing.T, o eventObjects) {
	b := o.b
	sub := b.createSubscription(t, "tok_flaky_review", "month")
	c := b.waitCharges(t, sub, 1, "requires_review")[0]["id"].(string)
	// The hold check that follows, in a job of its own and without an
	// event, appends what the gateway showed to the review reason: the
	// event shows the reason as it was before.
	inReview := func(attempt float64) {
		o.settled(t, "charge.requires_review", c, func(id string) map[string]any {
			var got map[string]any
			require.Eventually(t, func() bool {
				got = o.charge(t)(id)
				return got["attempt_count"] == attempt && strings.HasSuffix(got["review_reason"].(string), ")")
			}, 30*time.Second, 20*time.Millisecond, "the hold check's note")
			return got
		}, func(event, got map[string]any) {
			reason := event["review_reason"].(string)
			require.True(t, strings.HasPrefix(got["review_reason"].(string), reason+" ("), "%s", got["review_reason"])
			got["review_reason"] = reason
		})
	}
	inReview(1)
	// A retry publishes nothing of its own: the charge is on its way at
	// once, and the new attempt's outcome, which may commit before the
	// events are read, is the only event after it.
	mark := o.newest(t)
	b.call(t, http.MethodPost, "/v1/charges/"+c+"/retry", map[string]any{})
	require.Eventually(t, func() bool {
		got := o.charge(t)(c)
		return got["status"] == "requires_review" && got["attempt_count"] == float64(2)
	}, 30*time.Second, 20*time.Millisecond, "the retry in review again")
	for _, e := range o.eventsOf(t, c, mark) {
		object := e["data"].(map[string]any)["object"].(map[string]any)
		require.Equal(t, "charge.requires_review", e["type"], "an event after the retry")
		require.Equal(t, float64(2), object["attempt_count"], "the retry's event is the new attempt's outcome")
	}
	inReview(2)
	o.request(t, http.MethodPost, "/v1/charges/"+c+"/resolve",
		map[string]any{"outcome": "failed", "evidence": "sim1 ledger shows no operation for this key"}, o.charge(t), "charge.resolved")
	o.settled(t, "subscription.unpaid", sub, o.subscription(t))
}

func testEnrollmentEventObjects(t *testing.T, o eventObjects) {
	b := o.b
	start := b.autopayStart(t)
	enrollment := func(customer, token string, maxAmount int64) map[string]any {
		return map[string]any{"customer_id": customer, "kind": "fines", "account_ref": map[string]any{"sts": "77УА123456"},
			"currency": "RUB", "max_amount": maxAmount, "payment_method": cardExp(token, 12, 2035)}
	}
	enr := o.request(t, http.MethodPost, "/v1/enrollments", enrollment("cust-ann", "tok_ok", 60000), o.enrollment(t),
		"enrollment.created")["id"].(string)
	bills := "/v1/enrollments/" + enr + "/bills"
	o.request(t, http.MethodPost, "/v1/enrollments/"+enr+"/pause", nil, o.enrollment(t), "enrollment.paused")

	// Pushed while paused: kept pending. The same fine published to the
	// account's source is pulled by background work (the bill rests
	// pending: its object is the one a GET answers).
	paid := uin(61)
	o.request(t, http.MethodPost, bills, fine(paid, 100000, 50000, start, "2027-03-20", "2027-05-09"), o.bill(t, enr),
		"bill.received")
	sourced := uin(62)
	published := map[string]any{"account_ref": map[string]any{"sts": "77УА123456"}}
	for k, v := range fine(sourced, 100000, 50000, start, "2027-03-20", "2027-05-09") {
		published[k] = v
	}
	b.call(t, http.MethodPost, "/v1/dev/bill-sources/fines/bills", published)
	var sourcedID string
	require.Eventually(t, func() bool {
		for _, bill := range b.bills(t, enr) {
			if bill["bill_id"] == sourced {
				sourcedID = bill["id"].(string)
			}
		}
		return sourcedID != ""
	}, 30*time.Second, 20*time.Millisecond)
	o.settled(t, "bill.received", sourcedID, o.bill(t, enr))

	// Resumed: both fines are charged in the resume's transaction.
	o.request(t, http.MethodPost, "/v1/enrollments/"+enr+"/resume", nil, o.enrollment(t), "enrollment.resumed")
	for _, id := range []string{paid, sourced} {
		bill := b.waitBill(t, enr, id, "paid")
		o.settled(t, "bill.paid", bill["id"].(string), o.bill(t, enr))
	}
	o.request(t, http.MethodPost, "/v1/enrollments/"+enr+"/payment-method",
		cardExp("tok_ok_visa", 12, 2036), o.enrollment(t), "enrollment.payment_method_updated")

	// Above max_amount: awaits confirmation; confirmed, it is charged in
	// the confirmation's transaction.
	big := uin(63)
	o.request(t, http.MethodPost, bills, fine(big, 200000, 100000, start, "2027-03-20", "2027-05-09"), o.bill(t, enr),
		"bill.received", "bill.awaiting_confirmation")
	o.request(t, http.MethodPost, bills+"/"+big+"/confirm", nil, nil)
	b.waitBill(t, enr, big, "paid")

	// Arrived after its last payable moment: stored expired.
	late := uin(64)
	o.request(t, http.MethodPost, bills, plainFine(late, 100000, start.AddDate(0, -3, 0), "2027-02-01"), o.bill(t, enr),
		"bill.received", "bill.expired")

	// Withdrawn while its charge is declined and waiting: the charge is
	// voided in the withdraw's transaction.
	o.request(t, http.MethodPost, "/v1/enrollments/"+enr+"/payment-method",
		cardExp("tok_decline_funds", 12, 2036), o.enrollment(t), "enrollment.payment_method_updated")
	withdrawn := uin(65)
	o.request(t, http.MethodPost, bills, plainFine(withdrawn, 10000, start, "2027-05-09"), o.bill(t, enr), "bill.received")
	var charge string
	require.Eventually(t, func() bool {
		for _, c := range b.enrollmentCharges(t, enr) {
			if c["status"] == "declined" {
				charge = c["id"].(string)
			}
		}
		return charge != ""
	}, 30*time.Second, 20*time.Millisecond)
	o.request(t, http.MethodPost, bills+"/"+withdrawn+"/withdraw", nil, o.bill(t, enr), "bill.withdrawn")
	o.settled(t, "charge.voided", charge, o.charge(t))

	// A hard decline fails the bill.
	o.request(t, http.MethodPost, "/v1/enrollments/"+enr+"/payment-method",
		cardExp("tok_decline_hard", 12, 2036), o.enrollment(t), "enrollment.payment_method_updated")
	failing := uin(66)
	pushed := o.request(t, http.MethodPost, bills, plainFine(failing, 10000, start, "2027-05-09"), nil, "bill.received")
	b.waitBill(t, enr, failing, "failed")
	o.settled(t, "bill.failed", pushed["id"].(string), o.bill(t, enr))

	// Paid in full at a bank: never held, paid elsewhere.
	elsewhere := uin(67)
	b.call(t, http.MethodPost, "/v1/dev/registry/paid", map[string]any{"uin": elsewhere, "amount": 10000})
	pushed = o.request(t, http.MethodPost, bills, plainFine(elsewhere, 10000, start, "2027-05-09"), nil, "bill.received")
	b.waitBill(t, enr, elsewhere, "paid_elsewhere")
	o.settled(t, "bill.paid_elsewhere", pushed["id"].(string), o.bill(t, enr))

	// The same car enrolled by another customer: its copy of a fine paid
	// here is a duplicate.
	other := o.request(t, http.MethodPost, "/v1/enrollments", enrollment("cust-bob", "tok_ok", 600000), o.enrollment(t),
		"enrollment.created")["id"].(string)
	o.request(t, http.MethodPost, "/v1/enrollments/"+other+"/bills", fine(paid, 100000, 50000, start, "2027-03-20", "2027-05-09"),
		o.bill(t, other), "bill.received", "bill.duplicate")

	o.request(t, http.MethodPost, "/v1/enrollments/"+enr+"/cancel", nil, o.enrollment(t), "enrollment.cancelled")
}

// plainFine is a fine without a discount.
func plainFine(id string, amount int64, issued time.Time, due string) map[string]any {
	return map[string]any{"bill_id": id, "amount": amount, "issued_at": issued.Format(time.RFC3339), "due_date": due}
}

func mustTime(t *testing.T, v any) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, v.(string))
	require.NoError(t, err)
	return at
}
