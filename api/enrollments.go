package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-json-experiment/json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/apiobjects"
	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/charges"
	registrysim "github.com/rebill/rebill/charges/registry/sim"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

// Autopay is the enrollments' use cases (package usecases).
type Autopay interface {
	CreateEnrollment(ctx context.Context, tx pgx.Tx, caller usecases.Caller, n enrollments.New) (enrollments.Enrollment, error)
	Enrollment(ctx context.Context, caller usecases.Caller, id uuid.UUID) (enrollments.Enrollment, error)
	ListEnrollments(ctx context.Context, caller usecases.Caller, p enrollments.ListParams) ([]enrollments.Enrollment, error)
	PauseEnrollment(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (enrollments.Enrollment, error)
	ResumeEnrollment(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (enrollments.Enrollment, error)
	CancelEnrollment(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (enrollments.Enrollment, error)
	ChangeEnrollmentPaymentMethod(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, pm rebilltype.PaymentMethod) (enrollments.Enrollment, error)
	PushBill(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, in enrollments.BillInput) (enrollments.Bill, bool, error)
	Bills(ctx context.Context, caller usecases.Caller, id, before uuid.UUID, limit int) ([]enrollments.Bill, error)
	ConfirmBill(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, billID string) (enrollments.Bill, error)
	WithdrawBill(ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, billID string) (enrollments.Bill, error)
	EnrollmentCharges(ctx context.Context, caller usecases.Caller, id, before uuid.UUID, limit int) ([]charges.Charge, error)
}

// DevBillSources is dev mode's simulated bill sources.
type DevBillSources struct {
	// Publish files a bill in kind's source, in the request's transaction;
	// false when that account already had that bill id.
	Publish func(ctx context.Context, tx pgx.Tx, kind enrollments.Kind, b autopay.SourcedBill) (bool, error)
	// Published runs after the publish committed: the sources are pulled
	// at once.
	Published func(ctx context.Context)
}

// enrollmentRoutes adds the autopay endpoints to r (authenticated, with
// idempotency).
func (s *Server) enrollmentRoutes(r chi.Router) {
	staff := r.With(requireRole(apikeys.Admin, apikeys.Support))
	r.Post("/v1/enrollments", s.createEnrollment)
	r.Get("/v1/enrollments", s.listEnrollments)
	r.Get("/v1/enrollments/{id}", s.getEnrollment)
	r.Post("/v1/enrollments/{id}/pause", s.enrollmentChange(Autopay.PauseEnrollment))
	r.Post("/v1/enrollments/{id}/resume", s.enrollmentChange(Autopay.ResumeEnrollment))
	r.Post("/v1/enrollments/{id}/cancel", s.enrollmentChange(Autopay.CancelEnrollment))
	r.Post("/v1/enrollments/{id}/payment-method", s.changeEnrollmentPaymentMethod)
	staff.Post("/v1/enrollments/{id}/bills", s.pushBill)
	r.Get("/v1/enrollments/{id}/bills", s.listBills)
	r.Post("/v1/enrollments/{id}/bills/{bill_id}/confirm", s.billChange(Autopay.ConfirmBill))
	staff.Post("/v1/enrollments/{id}/bills/{bill_id}/withdraw", s.billChange(Autopay.WithdrawBill))
	r.Get("/v1/enrollments/{id}/charges", s.listEnrollmentCharges)
	if s.Dev != nil {
		staff.Post("/v1/dev/bill-sources/{kind}/bills", s.publishDevBill)
		staff.Get("/v1/dev/registry/ledger", s.registryLedger)
		staff.Post("/v1/dev/registry/{gateway}/faults", s.registryFaults)
		staff.Post("/v1/dev/registry/paid", s.registryPaidOutside)
		staff.Get("/v1/dev/zhkh/ledger", s.zhkhLedger)
		staff.Post("/v1/dev/zhkh/{party}/faults", s.zhkhFaults)
	}
}

// DevRegistry is the simulated state payment registry's book and its
// gateways' fault switches.
type DevRegistry interface {
	Known(gateway string) bool
	Ledger(ctx context.Context) ([]registrysim.LedgerEntry, error)
	SetFaults(ctx context.Context, gateway string, patch registrysim.FaultsPatch) (registrysim.Faults, error)
	// PaidOutside records a payment against uin made outside rebill.
	PaidOutside(ctx context.Context, uin string, amount int64) (registrysim.LedgerEntry, error)
}

// maxOutsidePayment bounds a payment recorded outside rebill: 10 billion
// roubles in kopecks, far above any fine.
const maxOutsidePayment = 1_000_000_000_000

func (s *Server) registryPaidOutside(w http.ResponseWriter, r *http.Request) {
	if s.Dev.Registry == nil {
		s.fail(w, r, errUnknownID)
		return
	}
	var body struct {
		UIN    *string `json:"uin"`
		Amount *int64  `json:"amount"`
	}
	if err := decodeBody(r, &body); err != nil {
		s.fail(w, r, err)
		return
	}
	var errs rebilltype.Errors
	switch {
	case body.UIN == nil:
		errs.Add("uin", "required")
	case !enrollments.ValidUIN(*body.UIN):
		errs.Add("uin", "must be a UIN: 20 or 25 digits with a valid check digit")
	}
	switch {
	case body.Amount == nil:
		errs.Add("amount", "required")
	case *body.Amount < 1 || *body.Amount > maxOutsidePayment:
		errs.Add("amount", "must be 1..1000000000000 (minor units)")
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	entry, err := s.Dev.Registry.PaidOutside(r.Context(), *body.UIN, *body.Amount)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, entry)
}

func (s *Server) registryLedger(w http.ResponseWriter, r *http.Request) {
	if s.Dev.Registry == nil {
		s.fail(w, r, errUnknownID)
		return
	}
	entries, err := s.Dev.Registry.Ledger(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if entries == nil {
		entries = []registrysim.LedgerEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": entries})
}

func (s *Server) registryFaults(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "gateway")
	if s.Dev.Registry == nil || !s.Dev.Registry.Known(name) {
		s.fail(w, r, errUnknownID)
		return
	}
	var patch registrysim.FaultsPatch
	if err := decodeBody(r, &patch); err != nil {
		s.fail(w, r, err)
		return
	}
	var errs rebilltype.Errors
	if patch.LatencyMS != nil && (*patch.LatencyMS < 0 || *patch.LatencyMS > 120_000) {
		errs.Add("latency_ms", "must be 0..120000")
	}
	if patch.ErrorRate != nil && (*patch.ErrorRate < 0 || *patch.ErrorRate > 1) {
		errs.Add("error_rate", "must be between 0 and 1")
	}
	if patch.Processing != nil && (*patch.Processing < 0 || *patch.Processing > 1000) {
		errs.Add("processing", "must be 0..1000")
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	faults, err := s.Dev.Registry.SetFaults(r.Context(), name, patch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, faults)
}

// accountRefJSON is account_ref: the ELS string (housing) or an object
// with sts and/or driver_license (fines).
type accountRefJSON struct {
	ref    enrollments.AccountRef
	object bool
}

// UnmarshalJSON reads either shape, refusing unknown members.
func (a *accountRefJSON) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		return json.Unmarshal(data, &a.ref.ELS)
	}
	var docs struct {
		STS           string `json:"sts"`
		DriverLicense string `json:"driver_license"`
	}
	if err := json.Unmarshal(data, &docs, json.RejectUnknownMembers(true)); err != nil {
		return err
	}
	a.ref.STS, a.ref.DriverLicense, a.object = docs.STS, docs.DriverLicense, true
	return nil
}

type createEnrollmentRequest struct {
	CustomerID    string                `json:"customer_id"`
	Kind          string                `json:"kind"`
	AccountRef    *accountRefJSON       `json:"account_ref"`
	PaymentMethod *paymentMethodRequest `json:"payment_method"`
	Currency      string                `json:"currency"`
	MaxAmount     int64                 `json:"max_amount"`
	PayDay        *int                  `json:"pay_day"`
	Description   string                `json:"description"`
	Metadata      map[string]string     `json:"metadata"`
	// ReceiptCustomer is where the 54-FZ receipts of the enrollment's
	// payments go (decision 31).
	ReceiptCustomer *subscriptions.ReceiptCustomer `json:"receipt_customer"`
}

// domain is the request as the use case validates it. A fines
// enrollment given a string (an ELS), or a housing one given an object, is
// refused by that validation: the shape does not match the kind.
func (req createEnrollmentRequest) domain() enrollments.New {
	n := enrollments.New{CustomerID: req.CustomerID, Kind: enrollments.Kind(req.Kind), Currency: req.Currency,
		MaxAmount: req.MaxAmount, Description: req.Description, Metadata: req.Metadata, ReceiptCustomer: req.ReceiptCustomer}
	if req.AccountRef != nil {
		n.AccountRef = req.AccountRef.ref
	}
	if req.PayDay != nil {
		n.PayDay = *req.PayDay
		if n.PayDay == 0 {
			n.PayDay = -1 // an explicit 0 is refused, not read as "on arrival"
		}
	}
	if req.PaymentMethod != nil {
		n.PaymentMethod = req.PaymentMethod.domain()
	}
	return n
}

func (s *Server) createEnrollment(w http.ResponseWriter, r *http.Request) {
	var req createEnrollmentRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	n := req.domain()
	n.ID = idempotency.CreationID(r.Context(), "enrollment")
	e, err := s.Autopay.CreateEnrollment(r.Context(), tx, callerFrom(r), n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/enrollments/"+e.ID.String())
	writeJSON(w, http.StatusCreated, apiobjects.FromEnrollment(e))
}

func (s *Server) getEnrollment(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	e, err := s.Autopay.Enrollment(r.Context(), callerFrom(r), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiobjects.FromEnrollment(e))
}

func (s *Server) listEnrollments(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, idCursor, func(before uuid.UUID, limit int) ([]enrollments.Enrollment, error) {
		p := enrollments.ListParams{CustomerID: r.URL.Query().Get("customer_id"), Before: before, Limit: limit}
		if !rebilltype.ValidCustomerID(p.CustomerID) && p.CustomerID != "" {
			return nil, rebilltype.Errors{{Field: "customer_id", Message: "must be 1..255 printable ASCII characters, not only spaces"}}
		}
		return s.Autopay.ListEnrollments(r.Context(), callerFrom(r), p)
	}, apiobjects.FromEnrollment, func(e enrollments.Enrollment) string { return e.ID.String() })
}

// enrollmentChange is a POST on /v1/enrollments/{id}/... with an empty
// body that runs one transition.
func (s *Server) enrollmentChange(use func(a Autopay, ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID) (enrollments.Enrollment, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		change(s, w, r, apiobjects.FromEnrollment, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (enrollments.Enrollment, error) {
			return use(s.Autopay, r.Context(), tx, callerFrom(r), id)
		})
	}
}

func (s *Server) changeEnrollmentPaymentMethod(w http.ResponseWriter, r *http.Request) {
	change(s, w, r, apiobjects.FromEnrollment, func(tx pgx.Tx, id uuid.UUID, req paymentMethodRequest) (enrollments.Enrollment, error) {
		return s.Autopay.ChangeEnrollmentPaymentMethod(r.Context(), tx, callerFrom(r), id, req.domain())
	})
}

type billRequest struct {
	BillID           string     `json:"bill_id"`
	Amount           int64      `json:"amount"`
	IssuedAt         *time.Time `json:"issued_at"`
	DueDate          string     `json:"due_date"`
	DiscountDeadline *string    `json:"discount_deadline"`
	DiscountedAmount *int64     `json:"discounted_amount"`
	// A housing bill's GIS ZhKH identifiers and supplier, each optional.
	PaymentDocumentID string `json:"payment_document_id"`
	ServiceID         string `json:"service_id"`
	Period            string `json:"period"`
	SupplierINN       string `json:"supplier_inn"`
	SupplierKPP       string `json:"supplier_kpp"`
	SupplierName      string `json:"supplier_name"`
}

// domain parses the dates. Returns rebilltype.Errors for a date that is
// not YYYY-MM-DD (the other fields are the use case's to check).
func (req billRequest) domain() (enrollments.BillInput, error) {
	in := enrollments.BillInput{BillID: req.BillID, Amount: req.Amount, DiscountedAmount: req.DiscountedAmount,
		PaymentDocumentID: req.PaymentDocumentID, ServiceID: req.ServiceID, Period: req.Period,
		Supplier: enrollments.Supplier{INN: req.SupplierINN, KPP: req.SupplierKPP, Name: req.SupplierName}}
	if req.IssuedAt != nil {
		in.IssuedAt = *req.IssuedAt
	}
	var errs rebilltype.Errors
	if req.DueDate != "" {
		d, err := enrollments.ParseDate(req.DueDate)
		if err != nil {
			errs.Add("due_date", "must be a date YYYY-MM-DD")
		}
		in.DueDate = d
	}
	if req.DiscountDeadline != nil {
		d, err := enrollments.ParseDate(*req.DiscountDeadline)
		if err != nil {
			errs.Add("discount_deadline", "must be a date YYYY-MM-DD")
		}
		in.DiscountDeadline = &d
	}
	return in, errs.Err()
}

func (s *Server) pushBill(w http.ResponseWriter, r *http.Request) {
	var req billRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	in, err := req.domain()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b, created, err := s.Autopay.PushBill(r.Context(), tx, callerFrom(r), id, in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, billJSON(r, b, s.now()))
}

// billJSON is b as the caller sees it: a duplicate names the enrollment
// that pays the bill only to staff, since it may be another customer's.
func billJSON(r *http.Request, b enrollments.Bill, now time.Time) apiobjects.Bill {
	out := apiobjects.FromBill(b, now)
	if callerFrom(r).CustomerID == "" {
		out.PaidByEnrollmentID = b.PaidByEnrollmentID
	}
	return out
}

// now is the service clock's time, for amount_due.
func (s *Server) now() time.Time {
	if s.Clock != nil {
		return s.Clock.Now()
	}
	return time.Now().UTC()
}

func (s *Server) listBills(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	listPage(s, w, r, idCursor, underPath(r, func(id, before uuid.UUID, limit int) ([]enrollments.Bill, error) {
		return s.Autopay.Bills(r.Context(), callerFrom(r), id, before, limit)
	}), func(b enrollments.Bill) apiobjects.Bill { return billJSON(r, b, now) },
		func(b enrollments.Bill) string { return b.ID.String() })
}

// billChange is a POST on /v1/enrollments/{id}/bills/{bill_id}/... with
// an empty body.
func (s *Server) billChange(use func(a Autopay, ctx context.Context, tx pgx.Tx, caller usecases.Caller, id uuid.UUID, billID string) (enrollments.Bill, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		show := func(b enrollments.Bill) apiobjects.Bill { return billJSON(r, b, s.now()) }
		change(s, w, r, show, func(tx pgx.Tx, id uuid.UUID, _ struct{}) (enrollments.Bill, error) {
			return use(s.Autopay, r.Context(), tx, callerFrom(r), id, chi.URLParam(r, "bill_id"))
		})
	}
}

func (s *Server) listEnrollmentCharges(w http.ResponseWriter, r *http.Request) {
	listPage(s, w, r, idCursor, underPath(r, func(id, before uuid.UUID, limit int) ([]charges.Charge, error) {
		return s.Autopay.EnrollmentCharges(r.Context(), callerFrom(r), id, before, limit)
	}), toChargeJSON, chargeCursor)
}

type devBillRequest struct {
	billRequest
	AccountRef *accountRefJSON `json:"account_ref"`
}

type devBillJSON struct {
	Kind      string `json:"kind"`
	BillID    string `json:"bill_id"`
	Published bool   `json:"published"`
}

// publishDevBill files a bill in a simulated bill source; the sources are
// pulled once it committed. A bill id published again for the same
// account keeps the first (published false).
func (s *Server) publishDevBill(w http.ResponseWriter, r *http.Request) {
	var req devBillRequest
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	kind := enrollments.Kind(chi.URLParam(r, "kind"))
	if s.Dev.BillSources == nil || (kind != enrollments.Housing && kind != enrollments.Fines) {
		s.fail(w, r, errUnknownID)
		return
	}
	in, err := req.domain()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var errs rebilltype.Errors
	var ref enrollments.AccountRef
	switch {
	case req.AccountRef == nil:
		errs.Add("account_ref", "is required")
	case kind == enrollments.Housing && req.AccountRef.object:
		errs.Add("account_ref", "must be the ELS, a string")
	case kind == enrollments.Fines && !req.AccountRef.object:
		errs.Add("account_ref", `must be an object with "sts" or "driver_license"`)
	case kind == enrollments.Fines:
		ref = req.AccountRef.ref
		if (ref.STS == "") == (ref.DriverLicense == "") ||
			!enrollments.ValidVehicleDocument(ref.STS+ref.DriverLicense) {
			errs.Add("account_ref", `must name exactly one of "sts" and "driver_license": 10 digits and capital letters`)
		}
	default:
		ref = req.AccountRef.ref
		var problem string
		if ref.ELS, problem = enrollments.CanonicalELS(ref.ELS); problem != "" {
			errs.Add("account_ref", "%s", problem)
		}
	}
	var billErrs rebilltype.Errors
	in = in.Canonical()
	if err := in.ValidateFor(kind, ref, s.now()); errors.As(err, &billErrs) {
		errs = append(errs, billErrs...)
	}
	if err := errs.Err(); err != nil {
		s.fail(w, r, err)
		return
	}
	published, err := s.Dev.BillSources.Publish(r.Context(), tx, kind, autopay.SourcedBill{Account: ref, Bill: in})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	idempotency.AfterCommit(r.Context(), s.Dev.BillSources.Published)
	writeJSON(w, http.StatusAccepted, devBillJSON{Kind: string(kind), BillID: in.BillID, Published: published})
}
