package api

import (
	"net/http"
	"strconv"

	"github.com/rebill/rebill/velocity"
)

// writeVelocityProblem answers 429 velocity-limit. The request changed
// nothing, and it is not stored under its Idempotency-Key (the middleware
// keeps only completed outcomes), so the same key runs once the window
// has passed.
func writeVelocityProblem(w http.ResponseWriter, e *velocity.ExceededError) {
	w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds()))
	writeProblem(w, newProblem(http.StatusTooManyRequests, "velocity-limit", "Velocity limit", e.Error()))
}
