// Package sim is the simulated payment gateway: a real HTTP server that
// plays one or more provider accounts, and [Client], the [gateway.Gateway]
// that talks to it over HTTP. Faults therefore cross a real connection:
// a timeout is a real timeout and a lost answer is a closed socket, so
// rebill's retry and look-up paths run exactly as they would against a
// provider.
//
// The sim stands for another company. Its ledger lives in PostgreSQL in its
// own schema, gatewaysim (see [Migrate]), so it outlives rebill's restarts.
//
// # Time
//
// An operation's time (at) is the service clock's, as a provider's books
// and rebill's agree on the day: in dev mode rebill starts the sim with
// its manual dev clock ([StartOnClock]), so a day reached by moving the
// clock holds the operations made on it, and reconciliation and `rebill
// audit` find them there. Look-ups, day listings and the ledger report
// that time. [Start] and [NewStore] use real time. The standalone process
// (`rebill gatewaysim`, [ListenAndServe]) stamps real time, or, with
// REBILL_DEV=1, the dev clock stored in its database (rebill's, which the
// dev nodes read). The ledger also keeps received_at, the real time the
// operation was recorded, for harnesses that order operations against
// their own requests. Fault switches and their cache run on real time.
//
// # Routes
//
// One server hosts several named gateways, each under its own path prefix:
//
//	POST /{gateway}/authorize            header Idempotency-Key, body {token, amount, currency, charge_key}
//	POST /{gateway}/capture              body {authorization_id, amount, currency, token?}
//	POST /{gateway}/void                 body {authorization_id, token?}
//	POST /{gateway}/refund               body {authorization_id, amount, currency}
//	GET  /{gateway}/operations/{key}     look-up by idempotency key; 404 operation_not_found
//	GET  /{gateway}/operations?day=YYYY-MM-DD
//	GET  /{gateway}/ledger               every operation, oldest first by at (dev endpoint)
//	GET  /{gateway}/faults
//	POST /{gateway}/faults               {down?, latency_ms?, error_rate?, captures_down?, refunds_down?, refunds_lost?}
//	GET  /{gateway}/health               200 {gateway, status: "ok"}; 503 while down
//
// A gateway the server does not host answers 404 on every route, so a
// client's base URL (root + "/" + name) can be checked with [Client.Health].
// A replayed idempotency key returns the stored result and records nothing,
// also when concurrent calls race with one key. Reusing a key for a
// different operation or amount, or for a hold of another card, is
// refused with 409 idempotency_key_reused, as Stripe refuses a key sent
// again with other parameters; [Client] then answers with the key's
// operation, looked up by the key, when it is the one asked (the same op
// on the same hold for the same money), and with gateway.ErrKeyReused
// when it is not.
//
// # Test tokens
//
// Behaviour follows the token's prefix:
//
//   - tok_ok: authorize succeeds; capture and void follow the state of the
//     authorization they name.
//   - tok_decline_funds: authorize is declined, insufficient_funds, soft.
//   - tok_decline_hard: authorize is declined, stolen_card, hard.
//   - tok_lost_response: authorize, capture and refund are processed and recorded as
//     succeeded, but no answer is ever written; the connection is dropped
//     once the caller gives up (or after a minute). Replays are lost the
//     same way; look-ups answer normally.
//   - tok_flaky: the first two calls with each idempotency key answer 503
//     and do nothing; later calls behave like tok_ok.
//   - tok_funds_after_<N>d (N 1..30) and tok_funds_after_<N>h (N 1..720),
//     N without leading zeros: a card whose funds return. Authorize is
//     declined like tok_decline_funds until N days (hours) after the first
//     authorize this gateway recorded with this exact token, by the
//     operations' time (at), and behaves like tok_ok from then on. The
//     token may go on with "_" and anything (tok_funds_after_3d_cust1), and
//     each distinct token has its own first attempt, so a test gives each
//     subscription its own card. The first attempt's time is kept in the
//     gatewaysim schema under the token's SHA-256 (the in-memory books keep
//     it in memory), so it holds across restarts and for every sim on the
//     database; a replayed key is no new attempt.
//   - anything else, tok_funds_after_0d and tok_funds_after_31d among
//     them: authorize fails with invalid_token.
//
// A capture or void sent without a token behaves like the card of the
// authorization it names.
//
// A refund returns money of the captured authorization it names: it fails
// not_captured before the capture (or after a void), currency_mismatch in
// another currency, and amount_exceeds_captured when with the succeeded
// refunds before it it would return more than was captured. A payment may
// have several refunds, each under its own key; they lock the
// authorization, so racing refunds never return more than the capture. Only a token's last four characters are stored,
// and no token is ever logged or put into an error.
//
// # Faults
//
// Per gateway, set through POST /{gateway}/faults or [Store.SetFaults]:
// down makes every operation and look-up answer 503; latency_ms delays them;
// error_rate is the fraction of operations that answer 503 having done
// nothing; captures_down and refunds_down make captures or refunds answer
// 503, doing nothing; refunds_lost performs every refund and loses its
// answer, as tok_lost_response does. The ledger and faults endpoints keep working regardless, since
// they are the test harness, not the provider's API. Health answers 503
// while down and ignores the other faults.
package sim
