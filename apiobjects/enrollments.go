package apiobjects

import (
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/subscriptions"
)

// VehicleDocuments is a fines enrollment's account: the STS and/or the
// driving licence.
type VehicleDocuments struct {
	STS           *string `json:"sts,omitempty"`
	DriverLicense *string `json:"driver_license,omitempty"`
}

// Enrollment is GET /v1/enrollments/{id}.
type Enrollment struct {
	ID         uuid.UUID `json:"id"`
	CustomerID string    `json:"customer_id"`
	Kind       string    `json:"kind"`
	// AccountRef is the ELS string (housing) or VehicleDocuments (fines).
	AccountRef    any               `json:"account_ref"`
	Status        string            `json:"status"`
	Currency      string            `json:"currency"`
	MaxAmount     int64             `json:"max_amount"`
	PayDay        *int              `json:"pay_day"`
	PaymentMethod PaymentMethod     `json:"payment_method"`
	Description   *string           `json:"description"`
	Metadata      map[string]string `json:"metadata"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	CancelledAt   *time.Time        `json:"cancelled_at"`
	// ReceiptCustomer is where its payments' 54-FZ receipts are sent.
	ReceiptCustomer *subscriptions.ReceiptCustomer `json:"receipt_customer"`
}

// FromEnrollment is e as its GET returns it.
func FromEnrollment(e enrollments.Enrollment) Enrollment {
	out := Enrollment{ID: e.ID, CustomerID: e.CustomerID, Kind: string(e.Kind), Status: string(e.Status), Currency: e.Currency,
		MaxAmount: e.MaxAmount,
		PaymentMethod: PaymentMethod{Gateway: e.PaymentMethod.Gateway, Brand: Optional(e.PaymentMethod.Brand),
			Last4: Optional(e.PaymentMethod.Last4), ExpMonth: e.PaymentMethod.ExpMonth, ExpYear: e.PaymentMethod.ExpYear},
		Description: Optional(e.Description), Metadata: e.Metadata, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		CancelledAt: UTCPtr(e.CancelledAt), ReceiptCustomer: e.ReceiptCustomer}
	if e.Kind == enrollments.Housing {
		out.AccountRef = e.AccountRef.ELS
	} else {
		out.AccountRef = VehicleDocuments{STS: Optional(e.AccountRef.STS), DriverLicense: Optional(e.AccountRef.DriverLicense)}
	}
	if e.PayDay != 0 {
		day := e.PayDay
		out.PayDay = &day
	}
	return out
}

// Bill is an enrollment's bill as GET /v1/enrollments/{id}/bills lists it.
type Bill struct {
	ID               uuid.UUID  `json:"id"`
	EnrollmentID     uuid.UUID  `json:"enrollment_id"`
	BillID           string     `json:"bill_id"`
	Amount           int64      `json:"amount"`
	DiscountedAmount *int64     `json:"discounted_amount"`
	DiscountDeadline *string    `json:"discount_deadline"`
	IssuedAt         time.Time  `json:"issued_at"`
	DueDate          string     `json:"due_date"`
	Status           string     `json:"status"`
	PayAt            time.Time  `json:"pay_at"`
	AmountDue        int64      `json:"amount_due"`
	ExpiresAt        time.Time  `json:"expires_at"`
	ChargeID         *uuid.UUID `json:"charge_id"`
	PaidAt           *time.Time `json:"paid_at"`
	ConfirmedAt      *time.Time `json:"confirmed_at"`
	ConfirmedAmount  *int64     `json:"confirmed_amount"`
	// PaidElsewhereAmount is what was reported paid against the bill
	// outside rebill; amount_due is what is left.
	PaidElsewhereAmount int64     `json:"paid_elsewhere_amount"`
	ReceivedAt          time.Time `json:"received_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	// PaidByEnrollmentID: on a duplicate, the enrollment whose copy is
	// paid; set for staff only (FromBill leaves it out).
	PaidByEnrollmentID *uuid.UUID `json:"paid_by_enrollment_id,omitempty"`
	// A housing bill's GIS ZhKH identifiers and supplier as first
	// stored; null when not given.
	PaymentDocumentID *string `json:"payment_document_id"`
	ServiceID         *string `json:"service_id"`
	Period            *string `json:"period"`
	SupplierINN       *string `json:"supplier_inn"`
	SupplierKPP       *string `json:"supplier_kpp"`
	SupplierName      *string `json:"supplier_name"`
}

// orNull is s, nil when empty.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// FromBill is b as read at now: amount_due is what a capture at now (or
// at pay_at, if later) costs.
func FromBill(b enrollments.Bill, now time.Time) Bill {
	at := now
	if b.PayAt.After(at) {
		at = b.PayAt
	}
	out := Bill{ID: b.ID, EnrollmentID: b.EnrollmentID, BillID: b.BillID, Amount: b.Amount, DiscountedAmount: b.DiscountedAmount,
		IssuedAt: b.IssuedAt, DueDate: b.DueDate.String(), Status: string(b.Status), PayAt: b.PayAt, AmountDue: b.AmountDue(at),
		ExpiresAt: b.ExpiresAt, ChargeID: b.ChargeID, PaidAt: UTCPtr(b.PaidAt), ConfirmedAt: UTCPtr(b.ConfirmedAt),
		ConfirmedAmount: b.ConfirmedAmount, PaidElsewhereAmount: b.PaidOutside, ReceivedAt: b.ReceivedAt, UpdatedAt: b.UpdatedAt,
		PaymentDocumentID: orNull(b.PaymentDocumentID), ServiceID: orNull(b.ServiceID), Period: orNull(b.Period),
		SupplierINN: orNull(b.Supplier.INN), SupplierKPP: orNull(b.Supplier.KPP), SupplierName: orNull(b.Supplier.Name)}
	if b.DiscountDeadline != nil {
		d := b.DiscountDeadline.String()
		out.DiscountDeadline = &d
	}
	return out
}
