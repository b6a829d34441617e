package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
)

// REBILL_BILL_RECEIPTS: by default rebill sends no bill receipt (the
// gateway's fiscalisation, as before); a kind sent by rebill needs the
// agent type and the kind's supplier, and a start without them stops
// naming every missing setting.
func TestBillReceipts(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (config.Config, error) {
		return config.Load(func(name string) string { return env[name] })
	}
	cfg, err := load(nil)
	require.NoError(t, err)
	require.Empty(t, cfg.BillReceipts.ByRebill, "no deployment starts sending receipts by itself")
	require.Equal(t, 1, cfg.BillReceipts.VATCode)
	require.Equal(t, map[string]string{"housing": "service", "fines": "payment"}, cfg.BillReceipts.PaymentSubjects)

	housing := "inn=7701234567;phone=+74951234567;name=ООО УК Дом; корпус 2"
	cfg, err = load(map[string]string{"REBILL_BILL_RECEIPTS": "housing=rebill,fines=gateway",
		"REBILL_BILL_RECEIPT_AGENT_TYPE": "payment_agent", "REBILL_BILL_RECEIPT_SUPPLIER_HOUSING": housing,
		"REBILL_BILL_RECEIPT_TAX_SYSTEM": "2", "REBILL_BILL_RECEIPT_PAYMENT_SUBJECTS": "housing=payment"})
	require.Error(t, err, "a name holding a semicolon is refused: the name comes last, but a field is split on ;")
	cfg, err = load(map[string]string{"REBILL_BILL_RECEIPTS": "housing=rebill,fines=gateway",
		"REBILL_BILL_RECEIPT_AGENT_TYPE": "payment_agent", "REBILL_BILL_RECEIPT_SUPPLIER_HOUSING": "inn=7701234567;phone=+74951234567;name=ООО УК Дом",
		"REBILL_BILL_RECEIPT_TAX_SYSTEM": "2", "REBILL_BILL_RECEIPT_PAYMENT_SUBJECTS": "housing=payment"})
	require.NoError(t, err)
	require.Equal(t, config.BillReceipts{ByRebill: map[string]bool{"housing": true, "fines": false}, AgentType: "payment_agent",
		VATCode: 1, TaxSystemCode: 2, PaymentSubjects: map[string]string{"housing": "payment", "fines": "payment"},
		Suppliers: map[string]config.Supplier{"housing": {Name: "ООО УК Дом", INN: "7701234567", Phone: "+74951234567"}}},
		cfg.BillReceipts)

	_, err = load(map[string]string{"REBILL_BILL_RECEIPTS": "housing=rebill,fines=rebill"})
	require.ErrorContains(t, err, "REBILL_BILL_RECEIPTS sends housing receipts: set REBILL_BILL_RECEIPT_AGENT_TYPE")
	require.ErrorContains(t, err, "set REBILL_BILL_RECEIPT_SUPPLIER_HOUSING")
	require.ErrorContains(t, err, "set REBILL_BILL_RECEIPT_SUPPLIER_FINES")

	for _, tc := range []struct{ env, value, want string }{
		{"REBILL_BILL_RECEIPTS", "housing=bank", `REBILL_BILL_RECEIPTS="housing=bank": housing: want rebill or gateway`},
		{"REBILL_BILL_RECEIPTS", "water=rebill", "the kind must be housing or fines"},
		{"REBILL_BILL_RECEIPTS", "housing=rebill,housing=gateway", "housing is named twice"},
		{"REBILL_BILL_RECEIPT_AGENT_TYPE", "bank", "want one of banking_payment_agent, banking_payment_subagent, payment_agent"},
		{"REBILL_BILL_RECEIPT_SUPPLIER_FINES", "inn=77;phone=74951234567;name=УФК", "inn: want 10 digits"},
		{"REBILL_BILL_RECEIPT_SUPPLIER_FINES", "inn=7707089101;name=УФК", "want all of inn, phone and name"},
		{"REBILL_BILL_RECEIPT_VAT_CODE", "13", "want 1..12"},
	} {
		_, err := load(map[string]string{tc.env: tc.value})
		require.ErrorContains(t, err, tc.want, tc.env+"="+tc.value)
	}
}
