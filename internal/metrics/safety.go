package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Velocity limits (package velocity), by limit: creations,
// payment_method_changes, declines.
var (
	VelocityLimited = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_velocity_limited_total",
		Help: "Requests refused with 429 velocity-limit, by limit (creations, payment_method_changes).",
	}, []string{"limit"})
	VelocityReviewed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rebill_velocity_declines_reviewed_total",
		Help: "Subscription charges sent to review instead of the gateway because their customer reached the declines-per-day limit.",
	})
)

// Secrets at rest (package vault and notify's webhook secrets).
var (
	SecretsResealed = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_secrets_resealed_total",
		Help: "Secrets sealed again under the current REBILL_ENCRYPTION_KEY, by kind (payment_token, webhook_secret, clear_token: a token found in clear and moved to the vault).",
	}, []string{"kind"})
)
