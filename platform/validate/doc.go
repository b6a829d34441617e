// Package validate holds the pure checks that the HTTP layer runs on request
// input before anything reaches the domain: strict JSON decoding (an
// adapter around github.com/go-json-experiment/json, the upstream of Go's
// json v2, that also refuses NUL and names fields the API's way), card
// number detection, currency codes, time zones and the Idempotency-Key
// header.
//
// Nothing here touches the network, the database or the clock, so the HTTP
// layer can call these functions freely and table tests can cover them
// exhaustively. Every error is meant to be shown to the client, so no
// message written here echoes a submitted value: it may be card data.
//
// # Errors
//
// [Decode] returns a [*DecodeError] (400) listing [rebilltype.FieldError] values that
// map one to one onto the `errors` list of an RFC 9457 problem: the first
// JSON-level error alone, or every string holding NUL. [ReadBody]
// returns [ErrBodyTooLarge] (413). [IdempotencyKey] returns errors matching
// [ErrIdempotencyKeyMissing] or [ErrIdempotencyKeyInvalid] under errors.Is;
// both are 400.
//
// # Order of checks
//
// The HTTP layer should call [ReadBody], then [FindCardNumber], then
// [Decode]: a field path in a [DecodeError] can repeat a key the client
// sent, and a key that is a card number must be refused before it can be
// echoed back or logged.
package validate
