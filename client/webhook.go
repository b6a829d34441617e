package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/rebill/rebill/client/signature"
)

// Webhook delivery headers.
const (
	WebhookSignatureHeader = signature.HeaderSignature
	WebhookEventIDHeader   = signature.HeaderEventID
)

// Errors of VerifyWebhook, for errors.Is.
var (
	ErrWebhookBadHeader = signature.ErrBadHeader
	ErrWebhookMismatch  = signature.ErrMismatch
	ErrWebhookTooOld    = signature.ErrTooOld
	ErrWebhookNoSecret  = signature.ErrNoSecret
)

// WebhookTolerance is how far a delivery's signing time may be from this
// machine's clock before VerifyWebhook refuses it as a possible replay.
const WebhookTolerance = signature.DefaultTolerance

// VerifyWebhook checks a delivery: payload is the raw request body, as
// received, before any JSON parsing (re-encoding changes the bytes);
// header the Rebill-Signature value; secrets the endpoint's whsec_
// secrets the receiver holds. Give both the old and the new secret while a
// secret is rolled: any match is enough.
func VerifyWebhook(payload []byte, header string, secrets ...string) error {
	return signature.Verify(header, payload, time.Now(), WebhookTolerance, secrets...)
}

// ParseWebhook verifies a delivery like VerifyWebhook and decodes its
// event. An event type this version does not know still decodes: its Type
// is the string sent.
func ParseWebhook(payload []byte, header string, secrets ...string) (*NotificationEvent, error) {
	if err := VerifyWebhook(payload, header, secrets...); err != nil {
		return nil, err
	}
	var ev NotificationEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("rebill webhook: decode the event: %w", err)
	}
	return &ev, nil
}
