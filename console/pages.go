package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
	"github.com/rebill/rebill/usecases"
)

// pageSize is the rows of one page of a list.
const pageSize = 25

// show renders a page; after a refused action (refuse) it is the page the
// form came from, with the reason in its alert box and the refusal's
// status.
func (h *Handler) show(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	s := sessionFrom(r.Context())
	p := page{Title: title, Session: &s, Data: data, RiverUI: h.opts.RiverUI,
		Flash: h.flash(r.Context(), s, r.URL.Query().Get("done"))}
	status := http.StatusOK
	if ref, ok := refusalOf(r.Context()); ok {
		status, p.Alert, p.Flash = ref.status, ref.message, ""
	}
	h.renderPage(w, r, status, name, p)
}

func (h *Handler) home(w http.ResponseWriter, r *http.Request) {
	h.show(w, r, "home", "Support console", nil)
}

// pathUUID reads the {id} path parameter; errNotFound when it is no id.
func pathUUID(r *http.Request, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(chi.URLParam(r, name))
	if err != nil {
		return uuid.Nil, errNotFound
	}
	return id, nil
}

// queryUUID reads an optional id cursor; uuid.Nil when absent or bad.
func queryUUID(r *http.Request, name string) uuid.UUID {
	id, err := uuid.Parse(r.URL.Query().Get(name))
	if err != nil {
		return uuid.Nil
	}
	return id
}

// more trims a list read with one row too many and reports whether there
// is a next page.
func more[T any](rows []T) ([]T, bool) {
	if len(rows) > pageSize {
		return rows[:pageSize], true
	}
	return rows, false
}

type searchHit struct {
	Kind, Label, Link string
}

type searchData struct {
	Query                 string
	Hits                  []searchHit
	Customer              string
	Subscriptions         []subscriptions.Subscription
	SubscriptionsNext     string
	Enrollments           []enrollments.Enrollment
	EnrollmentsNext       string
	ShowEnrollments       bool
	CustomerHasAnything   bool
	NothingFound, Refused bool
}

// search finds what q names: a subscription, charge, enrollment or bill
// id (one hit redirects to its page), a bill id or UIN, or a customer id
// (its subscriptions and enrollments).
func (h *Handler) search(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	ctx := r.Context()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	d := searchData{Query: q, ShowEnrollments: h.opts.Autopay != nil}
	if q == "" {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	if validate.LooksLikeCardNumber(q) {
		// Never echoed, never looked up: the console has no card numbers.
		h.renderPage(w, r, http.StatusUnprocessableEntity, "search", page{Title: "Search", Session: &s,
			Alert: "That looks like a card number: rebill keeps none. Search by a customer, subscription, charge, enrollment or bill id.",
			Data:  searchData{Refused: true}, RiverUI: h.opts.RiverUI})
		return
	}
	if len(q) > 200 {
		h.renderError(w, r, &s, http.StatusUnprocessableEntity, "The search is too long.")
		return
	}
	if id, err := uuid.Parse(q); err == nil {
		hits, err := h.idHits(ctx, s.caller(), id)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		d.Hits = hits
	}
	bills, err := h.billHits(ctx, q)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	d.Hits = append(d.Hits, bills...)

	caller := s.caller()
	subs, err := h.opts.Billing.ListSubscriptions(ctx, caller, subscriptions.ListParams{CustomerID: q,
		Before: queryUUID(r, "subscriptions_before"), Limit: pageSize + 1})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	d.Subscriptions, _ = more(subs)
	if len(subs) > pageSize {
		d.SubscriptionsNext = "/console/search?" + url.Values{"q": {q}, "subscriptions_before": {d.Subscriptions[pageSize-1].ID.String()}}.Encode()
	}
	if h.opts.Autopay != nil {
		ens, err := h.opts.Autopay.ListEnrollments(ctx, caller, enrollments.ListParams{CustomerID: q,
			Before: queryUUID(r, "enrollments_before"), Limit: pageSize + 1})
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		d.Enrollments, _ = more(ens)
		if len(ens) > pageSize {
			d.EnrollmentsNext = "/console/search?" + url.Values{"q": {q}, "enrollments_before": {d.Enrollments[pageSize-1].ID.String()}}.Encode()
		}
	}
	d.CustomerHasAnything = len(d.Subscriptions) > 0 || len(d.Enrollments) > 0 ||
		r.URL.Query().Get("subscriptions_before") != "" || r.URL.Query().Get("enrollments_before") != ""
	if d.CustomerHasAnything {
		d.Customer = q
	}
	if !d.CustomerHasAnything && len(d.Hits) == 1 {
		http.Redirect(w, r, d.Hits[0].Link, http.StatusSeeOther)
		return
	}
	d.NothingFound = !d.CustomerHasAnything && len(d.Hits) == 0
	status := http.StatusOK
	if d.NothingFound {
		status = http.StatusNotFound
	}
	h.renderPage(w, r, status, "search", page{Title: "Search", Session: &s, Data: d, RiverUI: h.opts.RiverUI})
}

// idHits: which objects have this id, each read through its owner's use
// case (staff see every customer's).
func (h *Handler) idHits(ctx context.Context, caller usecases.Caller, id uuid.UUID) ([]searchHit, error) {
	var hits []searchHit
	found := func(kind, path string, err error, notFound error) error {
		switch {
		case err == nil:
			hits = append(hits, searchHit{Kind: kind, Label: id.String(), Link: consolePath(path, id.String())})
			return nil
		case errors.Is(err, notFound):
			return nil
		}
		return fmt.Errorf("search ids: %w", err)
	}
	_, err := h.opts.Billing.Subscription(ctx, caller, id)
	if err := found("Subscription", "subscriptions", err, subscriptions.ErrNotFound); err != nil {
		return nil, err
	}
	_, err = h.opts.Billing.Charge(ctx, caller, id)
	if err := found("Charge", "charges", err, charges.ErrNotFound); err != nil {
		return nil, err
	}
	if h.opts.Autopay == nil {
		return hits, nil
	}
	_, err = h.opts.Autopay.Enrollment(ctx, caller, id)
	if err := found("Enrollment", "enrollments", err, enrollments.ErrNotFound); err != nil {
		return nil, err
	}
	b, err := enrollments.BillByID(ctx, h.opts.Pool, id)
	switch {
	case err == nil:
		hits = append(hits, searchHit{Kind: "Bill", Label: b.BillID, Link: consolePath("enrollments", b.EnrollmentID.String())})
	case !errors.Is(err, enrollments.ErrBillNotFound):
		return nil, fmt.Errorf("search ids: %w", err)
	}
	return hits, nil
}

// billHits: bills with this issuer bill id or UIN (package enrollments).
func (h *Handler) billHits(ctx context.Context, q string) ([]searchHit, error) {
	if h.opts.Autopay == nil {
		return nil, nil
	}
	bills, err := enrollments.BillsByReference(ctx, h.opts.Pool, q, 50)
	if err != nil {
		return nil, fmt.Errorf("search bills: %w", err)
	}
	hits := make([]searchHit, len(bills))
	for i, b := range bills {
		hits[i] = searchHit{Kind: "Bill", Label: b.BillID + " (customer " + b.CustomerID + ")",
			Link: consolePath("enrollments", b.EnrollmentID.String())}
	}
	return hits, nil
}

// attempt is one recorded outcome of a charge (its charge.* events).
type attempt struct {
	At           time.Time
	Event        string
	Number       int
	Gateway      string
	Key          string
	Outcome      string
	FailureCode  string
	ReviewReason string
}

type chargeView struct {
	Charge   charges.Charge
	Attempts []attempt
	// Refunds are the charge's refunds, oldest first (the charge page
	// only).
	Refunds []charges.Refund
	// Actions are what staff did to it in the console (the charge page
	// only).
	Actions []consoleAction
}

// attempts reads a charge's history from its published events (package
// notify): each holds the charge as that transition left it.
func (h *Handler) attempts(ctx context.Context, c charges.Charge) ([]attempt, error) {
	events, err := notify.ObjectHistory(ctx, h.opts.Pool, c.ID, "charge.", 500)
	if err != nil {
		return nil, fmt.Errorf("read charge events: %w", err)
	}
	out := make([]attempt, 0, len(events))
	for _, e := range events {
		var data struct {
			AttemptCount int    `json:"attempt_count"`
			Gateway      string `json:"gateway"`
			Status       string `json:"status"`
			FailureCode  string `json:"failure_code"`
			ReviewReason string `json:"review_reason"`
		}
		if err := json.Unmarshal(e.Object, &data); err != nil {
			return nil, fmt.Errorf("read charge event %s: %w", e.ID, err)
		}
		out = append(out, attempt{At: e.CreatedAt, Event: e.Type, Number: data.AttemptCount, Gateway: data.Gateway,
			Key: fmt.Sprintf("%s:a%d", c.Key(), data.AttemptCount), Outcome: data.Status, FailureCode: data.FailureCode,
			ReviewReason: data.ReviewReason})
	}
	return out, nil
}

func (h *Handler) chargeViews(ctx context.Context, cs []charges.Charge) ([]chargeView, error) {
	out := make([]chargeView, len(cs))
	for i, c := range cs {
		a, err := h.attempts(ctx, c)
		if err != nil {
			return nil, err
		}
		out[i] = chargeView{Charge: c, Attempts: a}
	}
	return out, nil
}

type subscriptionData struct {
	Sub         subscriptions.Subscription
	NextCharge  *time.Time
	Charges     []chargeView
	ChargesNext string
	Events      []subscriptions.Event
	EventsNext  string
	Metadata    []kv
	Period      *period.Period
	// Actions are what staff did to it in the console, with their key and
	// evidence.
	Actions []consoleAction
}

type kv struct{ Key, Value string }

func sortedMetadata(m map[string]string) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Key < out[j-1].Key; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func (h *Handler) subscription(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	ctx := r.Context()
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	sub, err := h.opts.Billing.Subscription(ctx, s.caller(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	d := subscriptionData{Sub: sub, Metadata: sortedMetadata(sub.Metadata), NextCharge: nextCharge(sub)}
	if now := h.opts.Clock.Now(); sub.Status != subscriptions.Cancelled && !now.Before(sub.BillingAnchor) {
		p := sub.Schedule().Period(sub.Schedule().IndexAt(now))
		d.Period = &p
	}
	if d.Actions, err = h.actionsOn(ctx, id.String()); err != nil {
		h.fail(w, r, s, err)
		return
	}
	cs, err := h.opts.Billing.SubscriptionCharges(ctx, s.caller(), id, queryUUID(r, "charges_before"), pageSize+1)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	cs, hasMore := more(cs)
	if hasMore {
		d.ChargesNext = consolePath("subscriptions", id.String()) + "?" + url.Values{"charges_before": {cs[len(cs)-1].ID.String()}}.Encode()
	}
	if d.Charges, err = h.chargeViews(ctx, cs); err != nil {
		h.fail(w, r, s, err)
		return
	}
	after, _ := strconv.ParseInt(r.URL.Query().Get("events_after"), 10, 64)
	events, err := h.opts.Billing.Events(ctx, s.caller(), id, max(after, 0), pageSize+1)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	d.Events, hasMore = more(events)
	if hasMore {
		d.EventsNext = consolePath("subscriptions", id.String()) + "?" + url.Values{"events_after": {strconv.FormatInt(d.Events[len(d.Events)-1].ID, 10)}}.Encode()
	}
	h.show(w, r, "subscription", "Subscription "+id.String(), d)
}

func (h *Handler) charge(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	c, err := h.opts.Billing.Charge(r.Context(), s.caller(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	views, err := h.chargeViews(r.Context(), []charges.Charge{c})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	if views[0].Actions, err = h.actionsOn(r.Context(), id.String()); err != nil {
		h.fail(w, r, s, err)
		return
	}
	if views[0].Refunds, err = charges.RefundsOf(r.Context(), h.opts.Pool, id); err != nil {
		h.fail(w, r, s, fmt.Errorf("read refunds: %w", err))
		return
	}
	h.show(w, r, "charge", "Charge "+id.String(), views[0])
}

type reviewData struct {
	Charges []chargeView
	Next    string
}

func (h *Handler) review(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	var after *charges.ReviewCursor
	if v := r.URL.Query().Get("after"); v != "" {
		c, err := charges.ParseReviewCursor(v)
		if err != nil {
			h.renderError(w, r, &s, http.StatusUnprocessableEntity, "The page cursor is not valid: start from the first page.")
			return
		}
		after = &c
	}
	cs, err := h.opts.Billing.ReviewQueue(r.Context(), after, pageSize+1)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	cs, hasMore := more(cs)
	d := reviewData{}
	if hasMore {
		last := cs[len(cs)-1]
		d.Next = "/console/review?" + url.Values{"after": {charges.ReviewCursorOf(last).String()}}.Encode()
	}
	if d.Charges, err = h.chargeViews(r.Context(), cs); err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.show(w, r, "review", "Review queue", d)
}

type billView struct {
	Bill     enrollments.Bill
	Charge   *charges.Charge
	Postings []posting
	Actions  []consoleAction
}

type posting struct {
	PaymentID, UIN, Status, Gateway string
	Attempt                         int
	Amount                          int64
	UpdatedAt                       time.Time
}

type consoleAction struct {
	Action, KeyID, Role, Evidence, Result string
	At                                    time.Time
}

type enrollmentData struct {
	Enrollment enrollments.Enrollment
	Metadata   []kv
	Bills      []billView
	BillsNext  string
}

func (h *Handler) enrollment(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	ctx := r.Context()
	if h.opts.Autopay == nil {
		h.fail(w, r, s, errNotFound)
		return
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	e, err := h.opts.Autopay.Enrollment(ctx, s.caller(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	bills, err := h.opts.Autopay.Bills(ctx, s.caller(), id, queryUUID(r, "bills_before"), pageSize+1)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	bills, hasMore := more(bills)
	d := enrollmentData{Enrollment: e, Metadata: sortedMetadata(e.Metadata)}
	if hasMore {
		d.BillsNext = consolePath("enrollments", id.String()) + "?" + url.Values{"bills_before": {bills[len(bills)-1].ID.String()}}.Encode()
	}
	for _, b := range bills {
		v := billView{Bill: b}
		if b.ChargeID != nil {
			c, err := h.opts.Billing.Charge(ctx, s.caller(), *b.ChargeID)
			if err != nil && !errors.Is(err, charges.ErrNotFound) {
				h.fail(w, r, s, err)
				return
			}
			if err == nil {
				v.Charge = &c
			}
			if v.Postings, err = h.postings(ctx, *b.ChargeID); err != nil {
				h.fail(w, r, s, err)
				return
			}
		}
		if v.Actions, err = h.actionsOn(ctx, b.ID.String()); err != nil {
			h.fail(w, r, s, err)
			return
		}
		d.Bills = append(d.Bills, v)
	}
	h.show(w, r, "enrollment", "Enrollment "+id.String(), d)
}

// postings reads a charge's registry postings from their owner (package
// charges).
func (h *Handler) postings(ctx context.Context, chargeID uuid.UUID) ([]posting, error) {
	list, err := charges.PostingsOfCharges(ctx, h.opts.Pool, []uuid.UUID{chargeID})
	if err != nil {
		return nil, fmt.Errorf("read registry postings: %w", err)
	}
	out := make([]posting, len(list))
	for i, p := range list {
		out[i] = posting{PaymentID: p.PaymentID, Attempt: p.Attempt, UIN: p.UIN, Amount: p.Amount, Status: string(p.Status),
			Gateway: p.Gateway, UpdatedAt: p.UpdatedAt}
	}
	return out, nil
}

// actionsOn lists what staff did to an object through the console, with
// the evidence they gave.
func (h *Handler) actionsOn(ctx context.Context, objectID string) ([]consoleAction, error) {
	rows, err := h.opts.Pool.Query(ctx, `SELECT action, key_id, role, coalesce(evidence, ''), result, at
		FROM console_actions WHERE object_id = $1 ORDER BY at, form_id LIMIT 100`, objectID)
	if err != nil {
		return nil, fmt.Errorf("read console actions: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (consoleAction, error) {
		var a consoleAction
		err := row.Scan(&a.Action, &a.KeyID, &a.Role, &a.Evidence, &a.Result, &a.At)
		return a, err
	})
}
