package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Signature headers of a delivery.
const (
	HeaderSignature = "Rebill-Signature"
	HeaderEventID   = "Rebill-Event-Id"
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

// Errors of Verify.
var (
	ErrBadSignatureHeader = errors.New("malformed Rebill-Signature header")
	ErrSignatureMismatch  = errors.New("no v1 signature matches the body")
	ErrSignatureTooOld    = errors.New("signature timestamp outside the tolerance")
)

// Verify checks a delivery as a receiver gets it: header is the
// Rebill-Signature value, body the raw request body (before any JSON
// parsing), now the receiver's clock and tolerance how far t may be from
// it (5 minutes is usual; 0 skips the check). Any v1 that matches is
// enough, so that a secret can be rolled with two signatures.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrBadSignatureHeader
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil {
				return ErrBadSignatureHeader
			}
			sigs = append(sigs, sig)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrBadSignatureHeader
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
			return ErrSignatureTooOld
		}
	}
	want := mac(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return ErrSignatureMismatch
}
