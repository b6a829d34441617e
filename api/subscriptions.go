package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/apiobjects"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/subscriptions/period"
)

type subscriptionJSON = apiobjects.Subscription

func optional(s string) *string { return apiobjects.Optional(s) }

func toSubscriptionJSON(s subscriptions.Subscription) subscriptionJSON {
	return apiobjects.FromSubscription(s)
}

type paymentMethodRequest struct {
	Gateway  string `json:"gateway"`
	Token    string `json:"token"`
	Brand    string `json:"brand"`
	Last4    string `json:"last4"`
	ExpMonth int    `json:"exp_month"`
	ExpYear  int    `json:"exp_year"`
}

type createSubscriptionRequest struct {
	CustomerID    string                 `json:"customer_id"`
	Amount        int64                  `json:"amount"`
	Currency      string                 `json:"currency"`
	Interval      string                 `json:"interval"`
	IntervalCount *int                   `json:"interval_count"`
	TimeZone      *string                `json:"timezone"`
	BillingAnchor *time.Time             `json:"billing_anchor"`
	PaymentMethod *paymentMethodRequest  `json:"payment_method"`
	Description   string                 `json:"description"`
	Metadata      map[string]string      `json:"metadata"`
	Receipt       *subscriptions.Receipt `json:"receipt"`

	// A trial: one of the two, never with BillingAnchor.
	TrialEnd        *time.Time `json:"trial_end"`
	TrialPeriodDays *int       `json:"trial_period_days"`
}

func (pm paymentMethodRequest) domain() rebilltype.PaymentMethod {
	return rebilltype.PaymentMethod{Gateway: pm.Gateway, Token: pm.Token, Brand: pm.Brand, Last4: pm.Last4,
		ExpMonth: pm.ExpMonth, ExpYear: pm.ExpYear}
}

// domain applies the defaults of the optional fields; what is given is
// validated by the use case as sent (an explicit interval_count of 0 is
// refused, not defaulted).
func (req createSubscriptionRequest) domain() subscriptions.New {
	n := subscriptions.New{CustomerID: req.CustomerID, Amount: req.Amount, Currency: req.Currency,
		Interval: period.Interval(req.Interval), IntervalCount: 1, TimeZone: "UTC", BillingAnchor: req.BillingAnchor,
		Description: req.Description, Metadata: req.Metadata, Receipt: req.Receipt,
		TrialEnd: req.TrialEnd, TrialPeriodDays: req.TrialPeriodDays}
	if req.IntervalCount != nil {
		n.IntervalCount = *req.IntervalCount
	}
	if req.TimeZone != nil {
		n.TimeZone = *req.TimeZone
	}
	if req.PaymentMethod != nil {
		n.PaymentMethod = req.PaymentMethod.domain()
	}
	return n
}

func (s *Server) createSubscription(w http.ResponseWriter, r *http.Request) {
	var req createSubscriptionRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	n := req.domain()
	n.ID = idempotency.CreationID(r.Context(), "subscription")
	sub, err := s.Billing.CreateSubscription(r.Context(), tx, callerFrom(r), n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/subscriptions/"+sub.ID.String())
	writeJSON(w, http.StatusCreated, toSubscriptionJSON(sub))
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sub, err := s.Billing.Subscription(r.Context(), callerFrom(r), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSubscriptionJSON(sub))
}

// listFilters reads the filters of GET /v1/subscriptions. Returns
// rebilltype.Errors.
func listFilters(r *http.Request) (subscriptions.ListParams, error) {
	p := subscriptions.ListParams{CustomerID: r.URL.Query().Get("customer_id")}
	var errs rebilltype.Errors
	if strings.ContainsRune(p.CustomerID, 0) {
		errs.Add("customer_id", `must not contain the NUL character (\u0000)`)
	}
	if st := r.URL.Query().Get("status"); st != "" {
		status, ok := subscriptions.ParseStatus(st)
		if !ok {
			errs.Add("status", "must be one of trialing, active, paused, past_due, unpaid, cancelled")
		}
		p.Status = status
	}
	return p, errs.Err()
}

func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, idCursor, func(before uuid.UUID, limit int) ([]subscriptions.Subscription, error) {
		p, err := listFilters(r)
		if err != nil {
			return nil, err
		}
		p.Before, p.Limit = before, limit
		return s.Billing.ListSubscriptions(r.Context(), callerFrom(r), p)
	}, toSubscriptionJSON, func(sub subscriptions.Subscription) string { return sub.ID.String() })
}

type pauseRequest struct {
	ResumeAt *time.Time `json:"resume_at"`
	// OnResume is nil when not given (or null): the default for a new
	// pause, the pause's own for a paused subscription.
	OnResume *subscriptions.OnResume `json:"on_resume"`
}

// onResume is the pause's on_resume for the use case, where "" means not
// given; an empty string sent is not a mode. Returns rebilltype.Errors.
func (req pauseRequest) onResume() (subscriptions.OnResume, error) {
	if req.OnResume == nil {
		return "", nil
	}
	if *req.OnResume == "" {
		return "", rebilltype.Errors{{Field: "on_resume", Message: "must be one of start_new_period, continue_period"}}
	}
	return *req.OnResume, nil
}

type cancelRequest struct {
	AtPeriodEnd bool `json:"at_period_end"`
}

func (s *Server) pauseSubscription(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toSubscriptionJSON, func(tx pgx.Tx, id uuid.UUID, req pauseRequest) (subscriptions.Subscription, error) {
		onResume, err := req.onResume()
		if err != nil {
			return subscriptions.Subscription{}, err
		}
		return s.Billing.Pause(r.Context(), tx, callerFrom(r), id, req.ResumeAt, onResume)
	})
}

func (s *Server) resumeSubscription(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toSubscriptionJSON, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (subscriptions.Subscription, error) {
		return s.Billing.Resume(r.Context(), tx, callerFrom(r), id)
	})
}

func (s *Server) cancelSubscription(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toSubscriptionJSON, func(tx pgx.Tx, id uuid.UUID, req cancelRequest) (subscriptions.Subscription, error) {
		return s.Billing.Cancel(r.Context(), tx, callerFrom(r), id, req.AtPeriodEnd)
	})
}

func (s *Server) changePaymentMethod(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, toSubscriptionJSON, func(tx pgx.Tx, id uuid.UUID, req paymentMethodRequest) (subscriptions.Subscription, error) {
		return s.Billing.ChangePaymentMethod(r.Context(), tx, callerFrom(r), id, req.domain())
	})
}

type actorJSON struct {
	ID   string `json:"id"`
	Role string `json:"role"`
}

type eventJSON struct {
	ID         int64     `json:"id"`
	Type       string    `json:"type"`
	FromStatus *string   `json:"from_status"`
	ToStatus   string    `json:"to_status"`
	Actor      actorJSON `json:"actor"`
	At         time.Time `json:"at"`
}

func toEventJSON(e subscriptions.Event) eventJSON {
	return eventJSON{ID: e.ID, Type: e.Type, FromStatus: optional(string(e.From)), ToStatus: string(e.To),
		Actor: actorJSON{ID: e.Actor.ID, Role: e.Actor.Role}, At: e.At}
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, seqCursor(0), underPath(r, func(id uuid.UUID, after int64, limit int) ([]subscriptions.Event, error) {
		return s.Billing.Events(r.Context(), callerFrom(r), id, after, limit)
	}), toEventJSON, func(e subscriptions.Event) string { return strconv.FormatInt(e.ID, 10) })
}
