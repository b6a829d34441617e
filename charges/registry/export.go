package registry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RegistryStatus is what the registry's own book says of one payment.
type RegistryStatus string

// The statuses of a payment in the registry's book.
const (
	// RegistryProcessing: taken, no outcome yet (not accepted).
	RegistryProcessing RegistryStatus = "processing"
	// RegistryAccepted: the registry holds the payment; the fine counts it.
	RegistryAccepted RegistryStatus = "accepted"
	// RegistryAnnulled: the registry held it and annulled it.
	RegistryAnnulled RegistryStatus = "annulled"
	// RegistryNotFound: the registry holds no payment under the id.
	RegistryNotFound RegistryStatus = "not_found"
)

// ExportedPayment is one payment of a registry's export of a day.
type ExportedPayment struct {
	PaymentID string
	UIN       string
	Amount    int64
	Status    RegistryStatus
	// ReceivedAt is when the registry took the payment: the day it is
	// exported under (UTC).
	ReceivedAt time.Time
	// AcceptedAt is when it was accepted; zero while processing.
	AcceptedAt time.Time
	// AnnulledAt is when it was annulled; zero unless annulled.
	AnnulledAt time.Time
}

// Exporter is a registry gateway that lists the payments it took on a
// day: GIS GMP's export of payments (ExportPaymentsRequest, "экспорт
// платежей" of the formats album, docs/registry.md [2][3]) for the
// payments the party imported, which reconciliation and the audit compare
// with rebill's postings. The operation is optional: a gateway without it
// is asked payment by payment (Lookup).
type Exporter interface {
	// Export lists every payment the gateway took on the UTC day that
	// starts at day (processing, accepted and annulled ones), oldest
	// first. Returns ErrExportUnsupported when the party has no export,
	// ErrUnavailable when it did not answer.
	Export(ctx context.Context, day time.Time) ([]ExportedPayment, error)
}

// ErrExportUnsupported: the gateway cannot list a day's payments (an
// HTTP party that answers the export with 404): ask it by payment id.
var ErrExportUnsupported = errors.New("the registry gateway has no export of payments")

// Export lists the payments g took on day, through its export when it has
// one; ErrExportUnsupported otherwise.
func Export(ctx context.Context, g Gateway, day time.Time) ([]ExportedPayment, error) {
	if s, ok := g.(settled); ok {
		if s.settings.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.settings.Timeout)
			defer cancel()
		}
		g = s.Gateway
	}
	e, ok := g.(Exporter)
	if !ok {
		return nil, fmt.Errorf("%s: %w", g.Name(), ErrExportUnsupported)
	}
	return e.Export(ctx, day)
}

// LookupStatus asks g about one payment, by payment id, as a status of
// the registry's book.
func LookupStatus(ctx context.Context, g Gateway, paymentID string) (RegistryStatus, error) {
	found, annulled, err := g.Lookup(ctx, paymentID)
	if _, pending := Pending(err); pending {
		return RegistryProcessing, nil
	}
	switch {
	case err != nil:
		return "", err
	case !found:
		return RegistryNotFound, nil
	case annulled:
		return RegistryAnnulled, nil
	}
	return RegistryAccepted, nil
}
