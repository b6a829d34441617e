package console

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/charges/gateway/fleet"
	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/reports"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

// subscriptionAction acts on the {id} subscription through a use case.
func (h *Handler) subscriptionAction(w http.ResponseWriter, r *http.Request, name string,
	do func(ctx context.Context, tx pgx.Tx, caller usecases.Caller) (string, error)) {
	s := sessionFrom(r.Context())
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.act(w, r, action{name: name, object: id.String(), back: consolePath("subscriptions", id.String()), do: do})
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	id, _ := pathUUID(r, "id")
	s := sessionFrom(r.Context())
	resumeAt, err := resumeAtField(r, s)
	if err != nil {
		h.refuse(w, r, consolePath("subscriptions", id.String()), err)
		return
	}
	name := "subscription.pause"
	if resumeAt != nil {
		name = "subscription.pause_until"
	}
	h.subscriptionAction(w, r, name, func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
		sub, err := h.opts.Billing.Pause(ctx, tx, c, id, resumeAt, subscriptions.OnResume(r.PostFormValue("on_resume")))
		if resumeAt != nil {
			return "Paused until " + resumeAt.UTC().Format("2006-01-02 15:04 UTC") + ": the subscription is " + string(sub.Status) + ".", err
		}
		return "Paused: the subscription is " + string(sub.Status) + ".", err
	})
}

// resumeAtField reads the pause form's optional resume_at: a day
// (YYYY-MM-DD) whose start, in the session's time zone, is when the
// subscription resumes by itself; nil when empty. The use case refuses a
// moment not in the future.
func resumeAtField(r *http.Request, s session) (*time.Time, error) {
	v := strings.TrimSpace(r.PostFormValue("resume_at"))
	if v == "" {
		return nil, nil
	}
	loc := s.loc
	if loc == nil {
		loc = time.UTC
	}
	day, err := time.ParseInLocation(time.DateOnly, v, loc)
	if err != nil {
		return nil, fmt.Errorf("%w: resume_at must be a day as YYYY-MM-DD", errInput)
	}
	return &day, nil
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	id, _ := pathUUID(r, "id")
	h.subscriptionAction(w, r, "subscription.resume", func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
		sub, err := h.opts.Billing.Resume(ctx, tx, c, id)
		return "Resumed: the subscription is " + string(sub.Status) + ".", err
	})
}

func (h *Handler) endTrial(w http.ResponseWriter, r *http.Request) {
	id, _ := pathUUID(r, "id")
	h.subscriptionAction(w, r, "subscription.end_trial", func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
		sub, err := h.opts.Billing.EndTrial(ctx, tx, c, id)
		return "Trial ended: the subscription is " + string(sub.Status) + " and its first period is charged.", err
	})
}

// cancelPage is the second step of Cancel now: what cancelling ends, and
// the button that does it (a page of its own, so it needs no script).
func (h *Handler) cancelPage(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	sub, err := h.opts.Billing.Subscription(r.Context(), s.caller(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.show(w, r, "cancel", "Cancel subscription "+id.String()+" now?", sub)
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, _ := pathUUID(r, "id")
	back := consolePath("subscriptions", id.String())
	var atPeriodEnd bool
	switch r.PostFormValue("at_period_end") {
	case "true":
		atPeriodEnd = true
	case "false":
		// Cancel now is final: only the confirmation page's form says it
		// was confirmed.
		if r.PostFormValue("confirmed") != "yes" {
			h.refuse(w, r, back, fmt.Errorf("%w: cancelling now must be confirmed on the page Cancel now opens", errInput))
			return
		}
	default:
		h.refuse(w, r, back, fmt.Errorf("%w: at_period_end must be true or false", errInput))
		return
	}
	name := "subscription.cancel"
	if atPeriodEnd {
		name = "subscription.cancel_at_period_end"
	}
	h.subscriptionAction(w, r, name, func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
		sub, err := h.opts.Billing.Cancel(ctx, tx, c, id, atPeriodEnd)
		if atPeriodEnd {
			return "Cancel at period end scheduled: the subscription is " + string(sub.Status) + " until its period ends.", err
		}
		return "Cancelled now: the subscription is " + string(sub.Status) + ".", err
	})
}

// chargeBack is where a charge action returns: the page the form was on
// (the review queue or the charge), never another site.
func chargeBack(r *http.Request, id string) string {
	if r.PostFormValue("back") == "review" {
		return "/console/review"
	}
	return consolePath("charges", id)
}

func (h *Handler) retry(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.act(w, r, action{name: "charge.retry", object: id.String(), back: chargeBack(r, id.String()),
		do: func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
			ch, err := h.opts.Billing.RetryCharge(ctx, tx, c, id)
			return fmt.Sprintf("Retry started: charge %s is %s (attempt %d).", id, ch.Status, ch.AttemptCount), err
		}})
}

func (h *Handler) resolve(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	outcome := charges.Status(r.PostFormValue("outcome"))
	if outcome != charges.Succeeded && outcome != charges.Failed {
		h.refuse(w, r, chargeBack(r, id.String()), fmt.Errorf("%w: outcome must be succeeded or failed", errInput))
		return
	}
	evidence, err := evidenceField(r)
	if err != nil {
		h.refuse(w, r, chargeBack(r, id.String()), err)
		return
	}
	h.act(w, r, action{name: "charge.resolve_" + string(outcome), object: id.String(), evidence: evidence,
		back: chargeBack(r, id.String()),
		do: func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
			ch, err := h.opts.Billing.ResolveCharge(ctx, tx, c, id, charges.Resolution{Outcome: outcome, Evidence: evidence,
				Actor: string(s.key.Role) + ":" + s.key.ID})
			return fmt.Sprintf("Resolved: charge %s is %s.", id, ch.Status), err
		}})
}

// refund asks for a refund of the charge through the refunds use case:
// the amount in the currency's major unit (empty: all that is left), a
// reason from the API's enum, and evidence like the other support
// actions. A refusal (a fine, nothing left, more than is left) is shown on
// the charge page with its reason.
func (h *Handler) refund(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	back := consolePath("charges", id.String())
	c, err := h.opts.Billing.Charge(r.Context(), s.caller(), id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	in := usecases.RefundInput{Reason: charges.RefundReason(r.PostFormValue("reason")),
		Actor: string(s.key.Role) + ":" + s.key.ID}
	if !in.Reason.Valid() {
		h.refuse(w, r, back, fmt.Errorf("%w: reason must be duplicate, fraudulent or requested_by_customer", errInput))
		return
	}
	if text := strings.TrimSpace(r.PostFormValue("amount")); text != "" {
		amount, err := minorUnits(text, c.Currency, "all that is left")
		if err != nil {
			h.refuse(w, r, back, err)
			return
		}
		in.Amount = &amount
	}
	if in.Evidence, err = evidenceField(r); err != nil {
		h.refuse(w, r, back, err)
		return
	}
	h.act(w, r, action{name: "charge.refund", object: id.String(), evidence: in.Evidence, back: back,
		do: func(ctx context.Context, tx pgx.Tx, caller usecases.Caller) (string, error) {
			rf, err := h.opts.Billing.RefundCharge(ctx, tx, caller, id, in)
			return fmt.Sprintf("Refund %d of %s asked (%s): it is %s until the gateway answers.", rf.N,
				money(rf.Amount, rf.Currency), rf.Reason, rf.Status), err
		}})
}

// minorUnits reads an amount typed in currency's major unit ("12.50"),
// with at most the currency's decimals, as minor units (1250); empty
// says what an empty field means, for the refusal's sentence.
func minorUnits(text, currency, empty string) (int64, error) {
	units, ok := validate.Currency(currency)
	if !ok {
		units = 2
	}
	whole, frac, dot := strings.Cut(text, ".")
	bad := fmt.Errorf("%w: amount must be a positive amount in %s with at most %d decimals, or empty for %s",
		errInput, currency, units, empty)
	if whole == "" || len(frac) > units || dot && frac == "" || len(whole) > 15 {
		return 0, bad
	}
	for _, d := range whole + frac {
		if d < '0' || d > '9' {
			return 0, bad
		}
	}
	frac += strings.Repeat("0", units-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil || n <= 0 {
		return 0, bad
	}
	return n, nil
}

// billAction acts on bill {bill} of enrollment {id}. The record is keyed
// by the bill's own id, so the enrollment page lists it under the bill.
func (h *Handler) billAction(w http.ResponseWriter, r *http.Request, name string, evidence string,
	do func(ctx context.Context, tx pgx.Tx, c usecases.Caller, billID string) (string, error)) {
	s := sessionFrom(r.Context())
	if h.opts.Autopay == nil {
		h.fail(w, r, s, errNotFound)
		return
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	billID := chi.URLParam(r, "bill")
	bill, err := h.opts.Autopay.Bill(r.Context(), s.caller(), id, billID)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.act(w, r, action{name: name, object: bill.ID.String(), evidence: evidence, back: consolePath("enrollments", id.String()),
		do: func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) { return do(ctx, tx, c, billID) }})
}

// confirmBill consents, for the customer, to a bill above the
// enrollment's cap: the person must say what the consent rests on, and
// the console keeps that with their key.
func (h *Handler) confirmBill(w http.ResponseWriter, r *http.Request) {
	id, _ := pathUUID(r, "id")
	evidence, err := evidenceField(r)
	if err != nil {
		h.refuse(w, r, consolePath("enrollments", id.String()), err)
		return
	}
	h.billAction(w, r, "bill.confirm", evidence, func(ctx context.Context, tx pgx.Tx, c usecases.Caller, billID string) (string, error) {
		b, err := h.opts.Autopay.ConfirmBill(ctx, tx, c, id, billID)
		return fmt.Sprintf("Confirmed: bill %s is %s.", billID, b.Status), err
	})
}

func (h *Handler) withdrawBill(w http.ResponseWriter, r *http.Request) {
	id, _ := pathUUID(r, "id")
	h.billAction(w, r, "bill.withdraw", "", func(ctx context.Context, tx pgx.Tx, c usecases.Caller, billID string) (string, error) {
		b, err := h.opts.Autopay.WithdrawBill(ctx, tx, c, id, billID)
		return fmt.Sprintf("Withdrawn: bill %s is %s.", billID, b.Status), err
	})
}

type operationsData struct {
	Today          time.Time
	Gateways       []fleet.GatewayStatus
	Reconciliation []books.Result
	Report         *reports.Daily
	ReportError    string
	Day            string
}

// operations shows the gateways' health as this node sees it, the
// reconciliation of the chosen UTC day (today by the service clock) per
// gateway, and that day's report.
func (h *Handler) operations(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	ctx := r.Context()
	now := h.opts.Clock.Now().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	if v := r.URL.Query().Get("date"); v != "" {
		d, err := time.Parse(time.DateOnly, v)
		if err != nil || d.Year() < 2000 || d.After(day.AddDate(0, 0, 1)) {
			h.renderError(w, r, &s, http.StatusUnprocessableEntity, "date must be a UTC day as YYYY-MM-DD from 2000-01-01 to tomorrow.")
			return
		}
		day = d
	}
	d := operationsData{Today: now, Day: day.Format(time.DateOnly)}
	if h.opts.Gateways != nil {
		d.Gateways = h.opts.Gateways.List()
	}
	if h.opts.Reconciliation != nil {
		for _, g := range d.Gateways {
			if !h.opts.Reconciliation.Known(g.Name) {
				continue
			}
			res, err := h.opts.Reconciliation.Day(ctx, g.Name, day)
			if err != nil {
				h.fail(w, r, s, err)
				return
			}
			d.Reconciliation = append(d.Reconciliation, res)
		}
	}
	if h.opts.Reports != nil {
		rep, err := h.opts.Reports.Daily(ctx, day)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		d.Report = &rep
	}
	h.show(w, r, "operations", "Operations", d)
}

// zones are the time zones the settings page offers (any IANA name is
// accepted when posted).
var zones = []string{"UTC", "Europe/London", "Europe/Berlin", "Europe/Kaliningrad", "Europe/Moscow", "Europe/Samara",
	"Asia/Yekaterinburg", "Asia/Omsk", "Asia/Novosibirsk", "Asia/Krasnoyarsk", "Asia/Irkutsk", "Asia/Yakutsk",
	"Asia/Vladivostok", "Asia/Magadan", "Asia/Kamchatka", "Asia/Dubai", "Asia/Kolkata", "Asia/Singapore", "Asia/Tokyo",
	"Australia/Sydney", "America/Sao_Paulo", "America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles"}

func loadZone(name string) *time.Location {
	loc, err := validate.TimeZone(name)
	if err != nil || loc == nil {
		return time.UTC
	}
	return loc
}

type settingsData struct {
	Zones   []string
	Current string
	Back    string
}

func (h *Handler) settingsPage(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	h.show(w, r, "settings", "Settings", settingsData{Zones: zones, Current: s.timeZone})
}

// settings stores the session's time zone (session state, not billing
// state: no form_id needed, setting it twice is setting it once).
func (h *Handler) settings(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	tz := r.PostFormValue("tz")
	if _, err := validate.TimeZone(tz); err != nil || tz == "" {
		h.renderError(w, r, &s, http.StatusUnprocessableEntity, "Pick a time zone from the list.")
		return
	}
	if _, err := h.opts.Pool.Exec(r.Context(), `UPDATE console_sessions SET time_zone = $2 WHERE id_hash = $1`, s.idHash, tz); err != nil {
		h.fail(w, r, s, fmt.Errorf("store time zone: %w", err))
		return
	}
	http.Redirect(w, r, "/console/settings?saved=1", http.StatusSeeOther)
}

type sessionRow struct {
	KeyID, Role, TimeZone string
	Sessions              int
	CreatedAt, LastSeenAt time.Time
	Mine                  bool
}

// sessions lists the live sessions per key (admin only), each key's with
// an End button: the way to end a console session at once, besides
// deleting (revoking) its key.
func (h *Handler) sessions(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	now := h.opts.Now()
	rows, err := h.opts.Pool.Query(r.Context(), `SELECT key_id, role, count(*), min(created_at), max(last_seen_at)
		FROM console_sessions WHERE last_seen_at > $1 AND created_at > $2 GROUP BY key_id, role`,
		now.Add(-h.opts.IdleTimeout), now.Add(-h.opts.MaxAge))
	if err != nil {
		h.fail(w, r, s, fmt.Errorf("list console sessions: %w", err))
		return
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sessionRow, error) {
		var x sessionRow
		err := row.Scan(&x.KeyID, &x.Role, &x.Sessions, &x.CreatedAt, &x.LastSeenAt)
		x.Mine = x.KeyID == s.key.ID
		return x, err
	})
	if err != nil {
		h.fail(w, r, s, fmt.Errorf("list console sessions: %w", err))
		return
	}
	sort.Slice(list, func(i, j int) bool { return list[i].LastSeenAt.After(list[j].LastSeenAt) })
	h.show(w, r, "sessions", "Sessions", list)
}

func (h *Handler) endSessions(w http.ResponseWriter, r *http.Request) {
	keyID := chi.URLParam(r, "key")
	h.act(w, r, action{name: "sessions.end", object: keyID, back: "/console/sessions",
		do: func(ctx context.Context, tx pgx.Tx, c usecases.Caller) (string, error) {
			if c.Actor.Role != string(apikeys.Admin) {
				return "", fmt.Errorf("%w: only an admin key may end sessions", errInput)
			}
			tag, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE key_id = $1`, keyID)
			if err != nil {
				return "", fmt.Errorf("end console sessions: %w", err)
			}
			return fmt.Sprintf("Ended %d session(s) of key %s.", tag.RowsAffected(), keyID), nil
		}})
}
