package notify

import (
	"time"

	"github.com/rebill/rebill/client/signature"
)

// Signature headers of a delivery.
const (
	HeaderSignature = signature.HeaderSignature
	HeaderEventID   = signature.HeaderEventID
)

// Sign is the Rebill-Signature value of body sent at t (see signature.Sign).
func Sign(secret string, t time.Time, body []byte) string {
	return signature.Sign(secret, t, body)
}

// SignAll signs with every live secret of an endpoint, one v1= each in
// the order given (the newest first), while a rolled secret still signs.
func SignAll(secrets []string, t time.Time, body []byte) string {
	return signature.SignAll(secrets, t, body)
}

// Errors of Verify: the signature package's own, so that errors.Is
// matches whichever package a receiver checks against.
var (
	ErrBadSignatureHeader = signature.ErrBadHeader
	ErrSignatureMismatch  = signature.ErrMismatch
	ErrSignatureTooOld    = signature.ErrTooOld
)

// Verify checks a delivery as a receiver gets it: header is the
// Rebill-Signature value, body the raw request body (before any JSON
// parsing), now the receiver's clock and tolerance how far t may be from
// it (5 minutes is usual; 0 skips the check). Any v1 that matches is
// enough, so that a secret can be rolled with two signatures.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	return signature.Verify(header, body, now, tolerance, secret)
}
