// Package signature signs and verifies rebill's webhook deliveries. It is
// public and free of the service's dependencies so that the sender (notify)
// and receivers (the Go client, anyone's handler) share one implementation:
// a receiver cannot drift from what the sender computes.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery.
const (
	HeaderSignature = "Rebill-Signature"
	HeaderEventID   = "Rebill-Event-Id"
)

// DefaultTolerance is how far a delivery's t may be from the receiver's
// clock: long enough for clock skew and a slow network, short enough that a
// captured delivery cannot be replayed days later.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify.
var (
	ErrBadHeader = errors.New("malformed Rebill-Signature header")
	ErrMismatch  = errors.New("no v1 signature matches the body")
	ErrTooOld    = errors.New("signature timestamp outside the tolerance")
	ErrNoSecret  = errors.New("no secret to verify with")
)

// Sign is the Rebill-Signature value of body sent at t:
// t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>, the HMAC
// key being the whole whsec_ string.
func Sign(secret string, t time.Time, body []byte) string {
	return SignAll([]string{secret}, t, body)
}

// SignAll signs with every live secret of an endpoint, one v1= each in
// the order given (the newest first), while a rolled secret still signs.
func SignAll(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	header := "t=" + ts
	for _, secret := range secrets {
		header += ",v1=" + hex.EncodeToString(mac(secret, ts, body))
	}
	return header
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a delivery as a receiver gets it: header is the
// Rebill-Signature value, body the raw request body (before any JSON
// parsing), now the receiver's clock and tolerance how far t may be from
// it (0 skips the check). Any v1 that matches any of the secrets is
// enough, so that a secret can be rolled: the sender signs with both while
// the old one lives, and a receiver may hold either or both.
func Verify(header string, body []byte, now time.Time, tolerance time.Duration, secrets ...string) error {
	if len(secrets) == 0 {
		return ErrNoSecret
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrBadHeader
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil {
				return ErrBadHeader
			}
			sigs = append(sigs, sig)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrBadHeader
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
			return ErrTooOld
		}
	}
	for _, secret := range secrets {
		want := mac(secret, ts, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return nil
			}
		}
	}
	return ErrMismatch
}
