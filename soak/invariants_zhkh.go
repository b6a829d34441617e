package soak

import "fmt"

// HousingPayment is a housing bill's charge as the GIS ZhKH checks judge
// it, with what the simulated party's ledger holds under its report id.
type HousingPayment struct {
	ChargeID string
	Status   string // the charge's
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
