package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Velocity limits (package velocity), by limit.
var VelocityLimited = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rebill_velocity_limited_total",
	Help: "What velocity limits stopped, by limit: requests refused with 429 (creations, payment_method_changes) and new charges sent to review instead of the gateway (declines).",
}, []string{"limit"})

// Secrets at rest (package vault and notify's webhook secrets).
var (
	SecretsResealed = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rebill_secrets_resealed_total",
		Help: "Secrets sealed again under the current REBILL_ENCRYPTION_KEY, by kind (payment_token, webhook_secret, clear_token: a token found in clear and moved to the vault).",
	}, []string{"kind"})
)
