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

func TestHousingDocumentPaidOnce(t *testing.T) {
	const doc = "ipd:75ДА533315-01-6111"
	one := HousingPayment{ChargeID: "c1", Key: "e1:2026-11", Status: "succeeded", Amount: 500, Document: doc}
	declined := HousingPayment{ChargeID: "c2", Key: "e2:2026-11", Status: "declined", Amount: 500, Document: doc}
	expect(t, HousingDocumentPaidOnce(housingData(one, declined)))
	refunded := one
	refunded.Refunded = 500
	expect(t, HousingDocumentPaidOnce(housingData(refunded, HousingPayment{ChargeID: "c2", Key: "e2:x", Status: "succeeded",
		Amount: 500, Document: doc})), "captured by 2 charges (c1, c2)")
	// The gateway's capture counts whatever rebill recorded.
	d := housingData(one, declined)
	d.BillLedger = []LedgerOp{{Gateway: "sim1", Op: "capture", IdempotencyKey: "e2:2026-11:a1:capture", Status: "succeeded"}}
	expect(t, HousingDocumentPaidOnce(d), "captured by 2 charges")
	expect(t, HousingDocumentPaidOnce(housingData(HousingPayment{ChargeID: "c1", Key: "e1:a", Status: "succeeded"},
		HousingPayment{ChargeID: "c2", Key: "e2:a", Status: "succeeded"})))
}
