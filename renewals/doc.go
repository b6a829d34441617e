// Package renewals turns due billing periods into charges. It composes
// the subscriptions and charges packages and owns the periodic scan: the
// one place that decides which periods are owed, so that running it any
// number of times, on any number of nodes, yields one charge per period.
//
// # Which periods are owed
//
// A period is owed when it begins while the subscription is active or past
// due. Periods that begin while it is paused or unpaid are skipped, not
// owed; no period that begins after a scheduled cancel is charged.
//
// # Catch-up
//
// After a long outage the current period and the missed periods that began
// within CatchUpWindow (90 days by default) are charged, oldest first, each
// under its deterministic key; older ones are skipped (counted in
// rebill_periods_skipped_total and logged), because charging a customer for
// years of arrears in one go is a decision for people, not a scheduler.
package renewals
