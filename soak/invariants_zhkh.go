package soak

import (
	"fmt"
	"slices"
	"strings"
)

// HousingPayment is a housing bill's charge as the GIS ZhKH checks judge
// it, with what the simulated party's ledger holds under its report id.
type HousingPayment struct {
	ChargeID string
	// Key is the charge's key, <enrollment_id>:<bill_id>, as the
	// gateways' idempotency keys carry it.
	Key    string
	Status string // the charge's
	// Document is the identity of the payment document (ИПД) the
	// charge's bill names, as rebill spells it ("": none).
	Document string
	Amount   int64
	Refunded int64 // what its succeeded refunds returned
	// Reports are the party's ledger entries under the charge's report id.
	Reports []ZhkhEntry
}

// ZhkhEntry is one report in the simulated GIS ZhKH party's ledger.
type ZhkhEntry struct {
	ReportID string
	Amount   int64
	Status   string // processing, accepted, refused, cancelled
}

// Names of the GIS ZhKH checks.
const (
	ZhkhReportedOnce      = "zhkh-reported-once"
	ZhkhRefundAnnulled    = "zhkh-refund-annulled"
	ZhkhNoReportNoCapture = "zhkh-no-report-without-capture"
	ZhkhDocumentPaidOnce  = "zhkh-document-paid-once"
)

// HousingReportedOnce: once everything settled, every captured housing
// payment not refunded in full is held by the GIS ZhKH party exactly
// once, accepted, for what was captured.
func HousingReportedOnce(d *Data) []Violation {
	var out []Violation
	for _, h := range d.Housing {
		if h.Status != "succeeded" || h.Refunded >= h.Amount {
			continue
		}
		if len(h.Reports) != 1 || h.Reports[0].Status != "accepted" || h.Reports[0].Amount != h.Amount {
			out = append(out, viol(ZhkhReportedOnce, "housing", h.ChargeID, fmt.Sprintf("charge %s captured %d (refunded %d): "+
				"the GIS ZhKH party holds %d reports of it (%v), want one accepted for %d", h.ChargeID, h.Amount, h.Refunded, len(h.Reports), h.Reports, h.Amount)))
		}
	}
	sortViolations(out)
	return out
}

// HousingRefundAnnulled: a housing payment refunded in full is held by the
// party at most once, and then cancelled (one refunded before it was ever
// reported is held by nobody).
func HousingRefundAnnulled(d *Data) []Violation {
	var out []Violation
	for _, h := range d.Housing {
		if h.Status != "succeeded" || h.Refunded < h.Amount {
			continue
		}
		if len(h.Reports) > 1 || (len(h.Reports) == 1 && h.Reports[0].Status != "cancelled") {
			out = append(out, viol(ZhkhRefundAnnulled, "housing", h.ChargeID, fmt.Sprintf("charge %s refunded in full (%d): "+
				"the GIS ZhKH party holds %v, want at most one, cancelled", h.ChargeID, h.Refunded, h.Reports)))
		}
	}
	sortViolations(out)
	return out
}

// HousingNoReportWithoutCapture: the party holds no report of a housing
// charge that did not succeed, and none that is no housing charge's.
func HousingNoReportWithoutCapture(d *Data) []Violation {
	var out []Violation
	for _, h := range d.Housing {
		if h.Status != "succeeded" && len(h.Reports) > 0 {
			out = append(out, viol(ZhkhNoReportNoCapture, "housing", h.ChargeID, fmt.Sprintf("charge %s is %s, yet the GIS ZhKH "+
				"party holds %v", h.ChargeID, h.Status, h.Reports)))
		}
	}
	for _, e := range d.ZhkhStray {
		out = append(out, viol(ZhkhNoReportNoCapture, "housing", "", fmt.Sprintf("the GIS ZhKH party holds report %s (%s, %d) "+
			"of no housing charge", e.ReportID, e.Status, e.Amount)))
	}
	sortViolations(out)
	return out
}

// HousingDocumentPaidOnce: a payment document (ИПД) is captured at most
// once, whichever enrollments, accounts and bill ids its copies came
// under (decision 23: its charge claims the document's identity, which a
// refund does not release). Captures are read from the gateways' ledgers
// (a capture succeeded under the charge's key), not from rebill's
// statuses, and a charge rebill records succeeded counts too.
func HousingDocumentPaidOnce(d *Data) []Violation {
	captured := map[string]bool{}
	for _, ops := range [][]LedgerOp{d.Ledger, d.BillLedger} {
		for _, o := range ops {
			if o.Op == "capture" && o.Status == "succeeded" {
				captured[o.ChargeKey()] = true
			}
		}
	}
	paid := map[string][]string{}
	for _, h := range d.Housing {
		if h.Document != "" && (captured[h.Key] || h.Status == "succeeded") {
			paid[h.Document] = append(paid[h.Document], h.ChargeID)
		}
	}
	var out []Violation
	for doc, chargeIDs := range paid {
		if len(chargeIDs) > 1 {
			slices.Sort(chargeIDs)
			out = append(out, viol(ZhkhDocumentPaidOnce, "housing", chargeIDs[1], fmt.Sprintf("payment document %s is "+
				"captured by %d charges (%s), want at most one", doc, len(chargeIDs), strings.Join(chargeIDs, ", "))))
		}
	}
	sortViolations(out)
	return out
}
