package yookassa

// Cancellation reasons with a meaning of their own beyond a decline.
const (
	// reasonExpiredOnCapture: the hold lapsed at expires_at before a
	// capture. A capture answers it as StatusFailed with this code: the
	// charge must be authorized again under a new key.
	reasonExpiredOnCapture = "expired_on_capture"
	// reasonCanceledByMerchant: a void (POST .../cancel) released the hold.
	reasonCanceledByMerchant = "canceled_by_merchant"
)

// hardReasons are the cancellation reasons that no later attempt with the
// same payment method can overcome. Every other reason, including those
// YooKassa adds later, is soft: dunning tries again. That includes
// internal_timeout (YooKassa gave up waiting for a partner): the same key
// would only return this canceled payment again, so the retry is the
// pipeline's next attempt, under a new key.
var hardReasons = map[string]bool{
	"card_expired":              true,
	"fraud_suspected":           true,
	"permission_revoked":        true, // the customer withdrew the right to charge the saved method
	"payment_method_restricted": true,
}

// hardDecline reports whether a canceled payment's reason is a hard
// decline.
func hardDecline(reason string) bool { return hardReasons[reason] }

// heldBefore reports whether a canceled payment had been authorized: it
// was released or lapsed, not declined.
func heldBefore(reason string) bool {
	return reason == reasonCanceledByMerchant || reason == reasonExpiredOnCapture
}
