package soak

import "testing"

func housingData(payments ...HousingPayment) *Data { return &Data{Housing: payments} }

func TestHousingReportedOnce(t *testing.T) {
	accepted := []ZhkhEntry{{ReportID: "r1", Amount: 500, Status: "accepted"}}
	expect(t, HousingReportedOnce(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 500, Reports: accepted})))
	expect(t, HousingReportedOnce(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 500})),
		"holds 0 reports")
	expect(t, HousingReportedOnce(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 500,
		Reports: append(accepted, ZhkhEntry{ReportID: "r2", Amount: 500, Status: "accepted"})})), "holds 2 reports")
	expect(t, HousingReportedOnce(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 600, Reports: accepted})),
		"want one accepted for 600")
	expect(t, HousingReportedOnce(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 500, Refunded: 100,
		Reports: accepted})))
	expect(t, HousingReportedOnce(housingData(HousingPayment{ChargeID: "c1", Status: "voided", Amount: 500})))
}

func TestHousingRefundAnnulled(t *testing.T) {
	cancelled := []ZhkhEntry{{ReportID: "r1", Amount: 500, Status: "cancelled"}}
	expect(t, HousingRefundAnnulled(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 500, Refunded: 500,
		Reports: cancelled})))
	expect(t, HousingRefundAnnulled(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 500, Refunded: 500})))
	expect(t, HousingRefundAnnulled(housingData(HousingPayment{ChargeID: "c1", Status: "succeeded", Amount: 500, Refunded: 500,
		Reports: []ZhkhEntry{{ReportID: "r1", Amount: 500, Status: "accepted"}}})), "want at most one, cancelled")
}

func TestHousingNoReportWithoutCapture(t *testing.T) {
	expect(t, HousingNoReportWithoutCapture(housingData(HousingPayment{ChargeID: "c1", Status: "voided", Amount: 500})))
	expect(t, HousingNoReportWithoutCapture(housingData(HousingPayment{ChargeID: "c1", Status: "failed", Amount: 500,
		Reports: []ZhkhEntry{{ReportID: "r1", Amount: 500, Status: "accepted"}}})), "is failed, yet")
	expect(t, HousingNoReportWithoutCapture(&Data{ZhkhStray: []ZhkhEntry{{ReportID: "r9", Amount: 1, Status: "accepted"}}}),
		"report r9")
}
