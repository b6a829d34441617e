// Package yookassa is the [gateway.Gateway] for a YooKassa shop (API v3),
// written on net/http: YooKassa publishes no official Go SDK, and no
// community one is well kept.
//
// # Operations
//
//	Authorize  POST /payments {amount, capture: false, payment_method_id: token, metadata, receipt?}
//	Capture    POST /payments/{id}/capture {amount, receipt?}
//	Void       POST /payments/{id}/cancel
//	Refund     POST /refunds {payment_id, amount, description, metadata, receipt?}
//	Lookup     GET /payments/{id}; or the create sent again; or GET /payments?created_at.gte=&created_at.lt=;
//	           a refund: GET /refunds?payment_id=, or the refund sent again
//	Operations GET /payments?created_at... and ?captured_at..., and GET /refunds?created_at... of the day
//
// The token is a saved payment method's id; the hold is the payment in
// status waiting_for_capture, and its id is every Result's Reference. The
// payment's metadata carries rebill's charge key and the call's key
// (rebill_charge_key, rebill_gateway_key). Amounts are sent as decimal
// strings in major units, converted exactly from minor units for the
// currencies of a fixed exponent table; any other currency is refused
// before a call. A Request's fiscal receipt (54-FZ) is sent with the hold
// and with the capture, its item prices converted the same way; an item
// paid on a supplier's behalf (a bill) carries the payment agent's
// items[].agent_type and items[].supplier {name, phone, inn}
// (https://yookassa.ru/developers/payment-acceptance/receipts/54fz/other-services/parameters-values#agent-type).
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
// # Refunds
//
// A refund names its payment (Request.AuthorizationID) and carries rebill's
// keys in its metadata; its Reference is the refund id, and a Request's
// receipt is sent as the refund receipt (54-FZ): its items are what is
// given back and add up to the refund's amount, and YooKassa requires it
// with a partial refund of a fiscalized payment. A refund is pending until
// the payment network answers (read again with GET /refunds/{id} until it
// moves; ctx ends first: ErrUnknownOutcome), then succeeded, or canceled:
// StatusFailed with cancellation_details.reason as the code. A refusal
// (4xx) is checked against the payment's refunds first: YooKassa refuses a
// key sent again with other parameters, and a refund already under the key
// with the same amount is the answer (another amount is an error for a
// person), so a refusal is never an unknown outcome.
//
// A lost refund is found among its payment's refunds by rebill_gateway_key.
// None there proves nothing while the first send may still be processing
// (202): with MayReplay the refund is sent again under its key (YooKassa
// answers the refund it made, or makes it now, as the caller would next);
// without, ErrUnprovable until a day past SentAt (plus the clock margin),
// then ErrNotFound. Two refunds under one key, or a look by key alone (no
// payment id), are ErrUnprovable. YooKassa keeps a refund's
// Idempotence-Key 24 hours, like a payment's.
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
