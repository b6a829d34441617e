// Package books checks rebill's charges against each gateway's own
// books once per UTC day (docs/operations.md, "Daily reconciliation").
//
// # What is matched
//
// Every operation the gateway lists for the day ([gateway.Gateway.Operations])
// is matched with a charge by the charge key inside its idempotency key
// ([charges.ParseGatewayKey]) and compared on amount, currency and status;
// every charge that rebill settled as succeeded that day (service clock) on
// the gateway must have a succeeded capture there (looked up by key when
// the gateway filed it under another day). Refund operations are matched
// the same way with rebill's refunds by their own keys
// ([charges.ParseRefundKey]), and every refund rebill settled as succeeded
// that day must have a succeeded refund of its amount there. What
// disagrees is recorded as a [Discrepancy] of one of [Kinds].
//
// # Review
//
// A charge's status belongs to the pipeline and may be final (succeeded),
// so reconciliation never moves it. Its discrepancies are review entries of
// their own (table reconciliation_discrepancies), shown by
// GET /v1/reconciliation, counted in
// rebill_reconciliation_discrepancies_total{gateway,kind} and
// rebill_reconciliation_open_discrepancies{gateway} (the alerts), and
// logged with the charge id.
//
// # The registry's book
//
// Fines are checked a second time against the state payment registry, per
// registry gateway and UTC day ([RegistryDayArgs], [CheckRegistry]): the
// payments the gateway's export lists for the day (or, for a gateway
// without one, a look-up per payment id of rebill's postings) are matched
// with the postings (read through charges) and the charges' captures. A
// payment still settling (within [Reconciler.AnnulWithin]) keeps the day
// pending instead of being called a discrepancy; the day's result is then
// kept like a gateway's, in tables of its own, with metrics labelled
// registry.
//
// # Catch-up
//
// A periodic tick enqueues one [DayArgs] job per gateway and finished day
// of the last [Reconciler.Days] days that has no result yet, so a day
// missed while no node ran, or whose gateway did not answer, is checked by
// a later tick. A day whose gateway is down, or paused (its circuit open:
// it is not asked then), is retried at waits that double from a minute to
// an hour; if River discards it after its last attempt, the next tick
// enqueues it again. A day is checked once; its
// result is kept.
package books
