// Package stripe is the [gateway.Gateway] for one Stripe account, through
// the official client (github.com/stripe/stripe-go/v82): a hold is a
// PaymentIntent created with capture_method=manual, confirm=true and
// off_session=true; a capture captures it, a void cancels it. Every call
// carries rebill's gateway key as its Idempotency-Key, so Stripe answers a
// repeated call with its first answer and does nothing new.
//
// The recurring token is "<customer id>/<payment method id>" (cus_…/pm_…,
// or a legacy card_… or src_…); a token of another shape fails the charge
// (StatusFailed, invalid_token) without a call. Neither the token nor the
// API key appears in an error or a log line: errors carry the status, the
// error type and code and Stripe's request id, never Stripe's message.
//
// # References and look-ups
//
// A Result's Reference is the PaymentIntent id; rebill stores it with a
// successful hold, and capture and void name it (Request.AuthorizationID).
// Lookup with a reference retrieves the PaymentIntent and reads the op's
// outcome from its status:
//
//	status                    authorize        capture          void
//	requires_capture          succeeded        ErrNotFound      ErrNotFound
//	succeeded                 succeeded        succeeded        ErrNotFound
//	canceled                  succeeded (1)    ErrNotFound      succeeded
//	requires_payment_method   declined (2)     ErrNotFound      ErrNotFound
//	requires_action           failed, authentication_required
//	processing, other         ErrUnknownOutcome
//
// (1) declined, as (2), when the PaymentIntent carries a last payment
// error: it was never held. (2) with that error's decline code.
//
// Stripe keeps no index by idempotency key, and Search is eventually
// consistent (a miss there proves nothing). So a lost authorize answer,
// which leaves rebill without a reference, is looked up by replaying the
// create under the same key: Stripe returns the first answer and creates
// nothing new. Stripe forgets keys after 24 hours; past [ReplayWindow]
// (23 h, a margin for clock skew) from the first send, Lookup returns
// [gateway.ErrUnprovable] and the charge goes to review instead of risking
// a second PaymentIntent. If the first send never reached Stripe, the
// replay places the hold, exactly as the resend that would follow a
// not-found would; so the replay is sent only when the caller allows it
// (LookupRequest.MayReplay: reconcile, the hold check), and a look that
// must not move money gets ErrUnprovable. Stripe also keeps a 500 under the key, so an authorize
// that got one answers 500 to every replay: it stays unknown and ends in
// review. A capture or void without a reference was never sent (rebill
// sends neither without one): ErrNotFound. A PaymentIntent whose metadata
// names another charge settles nothing (an error, not a verdict).
//
// A key Stripe refuses because its first request had other parameters
// (400 idempotency_error: a charge restored from a backup asks for its
// hold with the card the customer changed to since, or captures another
// amount) is not an unknown outcome. For a hold, the customer's
// PaymentIntents are listed (GET /v1/payment_intents?customer=…, lists
// being consistent with Stripe's writes) and the one carrying the key in
// rebill_authorize_key answers, read as a look-up reads it; for a capture
// or void, the PaymentIntent it names does. One that holds or captured
// other money than asked, or none, is gateway.ErrKeyReused, for a person.
//
// Go's transport itself sends a request again when a reused keep-alive
// connection dies before any answer: the Idempotency-Key header makes
// net/http deem it safe, and it is, since Stripe replays the first answer.
//
// # Outcomes
//
//	answer                                        outcome
//	200 PaymentIntent                             the status table above
//	402 card_error, decline code:
//	  insufficient_funds, processing_error,
//	  do_not_honor, generic_decline, any other    declined, soft (dunning retries)
//	  stolen_card, lost_card, expired_card,
//	  pickup_card                                 declined, hard
//	  authentication_required                     failed, authentication_required (needs the customer)
//	400, 404 invalid_request_error                failed, with Stripe's code (retrying cannot help)
//	400 idempotency_error (key reused with
//	  other parameters)                           what the key did (below); never unknown
//	401, 403 (API key refused)                    ErrUnavailable: nothing done; charges wait for a fixed key
//	409 idempotency_key_in_use                    ErrUnknownOutcome: the first send is still running
//	429 (rate limit, lock_timeout)                ErrUnavailable
//	503                                           ErrUnavailable
//	500, 502, 504, other 5xx                      ErrUnknownOutcome: with a key, Stripe may have acted
//	connection refused, DNS failure, any error
//	  before the request was written              ErrUnavailable
//	timeout, reset, cut after the request
//	  was written                                 ErrUnknownOutcome
//
// The client's own retries are off: retries are rebill's (same key, River
// backoff), and every call is bounded by Config.Timeout.
//
// # Refunds
//
// [Gateway.Refund] is POST /v1/refunds with payment_intent (the hold's
// reference), amount, reason requested_by_customer and metadata naming the
// charge and the refund's key (rebill_charge_key, rebill_refund_key), under
// the refund's own key as Idempotency-Key. Its Reference is the refund id
// (re_…). A refund's outcome is its status:
//
//	succeeded                  succeeded
//	failed                     failed, failure_reason as the code (lost_or_stolen_card,
//	                           expired_or_canceled_card, unknown)
//	canceled                   failed, refund_canceled
//	pending, requires_action   ErrUnknownOutcome: it may still fail
//	400 amount_too_large and
//	  other invalid requests   failed, with Stripe's code: nothing was refunded
//	400 idempotency_error      the key was first sent with other parameters: the
//	                           payment's refunds say what it did (below); never unknown
//
// A refund is looked up among its PaymentIntent's refunds (GET
// /v1/refunds?payment_intent=…), matched by rebill_refund_key. Lists are
// consistent with Stripe's writes, unlike Search, so a refund not listed was
// not made (ErrNotFound: send it again under its key) and no replay is ever
// needed, at any age. A look-up by key alone (no PaymentIntent) answers
// ErrUnprovable; so does a key found on two refunds (money went back twice).
// After a 400 idempotency_error, a refund under the key with the request's
// amount is the answer, one with another amount is an error for a person,
// and none is StatusFailed idempotency_key_reused. Stripe may fail a card
// refund after it succeeded: a later look-up or listing reads it failed.
// Stripe keeps a refund's idempotency key 24 hours, like any other.
//
// # Reconciliation
//
// [Gateway.Operations] lists the PaymentIntents created on the UTC day
// (auto-paging) and reports, per PaymentIntent, its authorize and, when
// they happened, its capture and void. A capture or void is listed under
// the day its PaymentIntent was created; a void's idempotency key is not
// known to Stripe (cancel takes no metadata) and is left empty. It then
// lists the refunds created that day (GET /v1/refunds?created…), with
// their keys; pending ones are left to a later listing, and refunds made
// outside rebill (the dashboard) are listed with no key.
package stripe
