// Package yookassa is the [gateway.Gateway] for a YooKassa shop (API v3),
// written on net/http: YooKassa publishes no official Go SDK, and no
// community one is well kept.
//
// # Operations
//
//	Authorize  POST /payments {amount, capture: false, payment_method_id: token, metadata, receipt?}
//	Capture    POST /payments/{id}/capture {amount, receipt?}
//	Void       POST /payments/{id}/cancel
//	Lookup     GET /payments/{id}; or the create sent again; or GET /payments?created_at.gte=&created_at.lt=
//	Operations GET /payments?created_at... and ?captured_at... of the day
//
// The token is a saved payment method's id; the hold is the payment in
// status waiting_for_capture, and its id is every Result's Reference. The
// payment's metadata carries rebill's charge key and the call's key
// (rebill_charge_key, rebill_gateway_key). Amounts are sent as decimal
// strings in major units, converted exactly from minor units for the
// currencies of a fixed exponent table; any other currency is refused
// before a call. A Request's fiscal receipt (54-FZ) is sent with the hold
// and with the capture, its item prices converted the same way.
//
// Every POST carries an Idempotence-Key: a UUIDv5 of rebill's key ([IdempotenceKey]),
// since YooKassa takes at most 64 characters and keeps a key 24 hours.
// Requests authenticate with HTTP Basic, shop id and secret key; neither
// the secret nor the token appears in an error or a log.
//
// # Answers
//
//	HTTP answer                                  outcome
//	200 waiting_for_capture                      authorize: StatusSucceeded, ExpiresAt = expires_at
//	200 succeeded                                authorize or capture: StatusSucceeded
//	200 pending                                  read again until it moves; ctx ends first: ErrUnknownOutcome
//	200 canceled, reason in the table below      authorize: StatusDeclined, DeclineCode = reason
//	200 canceled, canceled_by_merchant           void: StatusSucceeded (authorize: the hold had been placed)
//	200 canceled, expired_on_capture             capture: StatusFailed, DeclineCode "expired_on_capture"
//	202 {retry_after: ms}                        wait, send again with the same key; ctx ends first: ErrUnknownOutcome
//	400, 404, other 4xx                          StatusFailed, DeclineCode = YooKassa's error code; a capture or
//	                                             void first reads the payment: if it is already captured or
//	                                             canceled (an earlier call whose key was forgotten), its
//	                                             state answers instead
//	401, 403                                     ErrUnavailable (nothing done; the shop id or secret is wrong)
//	429, 503                                     ErrUnavailable
//	500, 502, 504, other 5xx                     ErrUnknownOutcome
//	request never sent (refused connection)      ErrUnavailable
//	sent, no answer (timeout, reset)             ErrUnknownOutcome
//
// # Cancellation reasons
//
//	insufficient_funds, issuer_unavailable,
//	payment_method_limit_exceeded                 soft decline: dunning tries again
//	card_expired, fraud_suspected,
//	permission_revoked, payment_method_restricted hard decline: no retry
//	internal_timeout                              soft decline, code internal_timeout: the same key would
//	                                              only return this canceled payment, so the retry is the
//	                                              pipeline's next attempt, under a new key
//	expired_on_capture                            the hold lapsed: capture answers StatusFailed with this
//	                                              code; hold expiry authorizes again under a new key
//	canceled_by_merchant                          a void released the hold
//	any other reason                              soft decline
//
// # Lookup without a payment id
//
// YooKassa cannot find a payment by idempotence key or metadata. When the
// create's answer was lost, [Gateway.Lookup] sends the create again with
// the same key while YooKassa still remembers it (until 24 hours after
// SentAt, less a 10 minute margin for clock skew): YooKassa answers the
// payment it made then, or makes it now if the first send never arrived.
// A lookup within that window therefore never returns ErrNotFound, and may
// itself place the hold (which is what the pipeline would do next). If
// YooKassa refuses the replay (the key is held by a request that differed,
// or the request is bad), the payments since SentAt are scanned as below,
// and only when none carries the key is the refusal the answer. Past
// the window it pages through the payments created from SentAt to the
// end of the key's life and matches rebill_gateway_key locally; no match
// (or several) is ErrUnprovable, and the charge goes to review. The scan
// reads every page of that day within the call's timeout: a shop with
// very many payments a day may need a longer one.
//
// A replay is sent only when the caller allows it (LookupRequest.MayReplay:
// the reconcile job, which would send the create again anyway, and the
// hold check, which releases what it finds). A look that must not move
// money (before a support retry) only scans, and answers ErrUnprovable
// when no payment carries the key: the first send may still arrive.
package yookassa
