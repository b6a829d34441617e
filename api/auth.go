package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

// Principal is the authenticated caller: the API key that signed the
// request.
type Principal apikeys.Key

// Caller is the principal as the use cases see it: the author of events
// and, for a customer key, the one customer it acts for.
func (p Principal) Caller() usecases.Caller {
	return usecases.Caller{Actor: subscriptions.Actor{ID: p.ID, Role: string(p.Role)}, CustomerID: p.CustomerID}
}

// IdempotencyScope is the namespace of the principal's idempotency keys. A
// customer's keys are scoped to the customer, like Stripe scopes keys to an
// account, so a retry survives the rotation of its API key; staff keys are
// scoped to the key itself.
func (p Principal) IdempotencyScope() string {
	if p.Role == apikeys.Customer {
		return "customer:" + p.CustomerID
	}
	return "key:" + p.ID
}

type principalKey struct{}

func principalFrom(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

func callerFrom(r *http.Request) usecases.Caller { return principalFrom(r.Context()).Caller() }

// authenticate resolves the bearer token; 401 when missing or wrong, 503
// when the key store cannot be read.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			writeProblem(w, problemUnauthorized)
			return
		}
		key, err := s.Keys.Authenticate(r.Context(), token)
		if errors.Is(err, apikeys.ErrUnauthenticated) {
			writeProblem(w, problemUnauthorized)
			return
		}
		if err != nil {
			s.Logger.Error().Err(err).Msg("authentication failed")
			w.Header().Set("Retry-After", "1")
			writeProblem(w, problemUnavailable)
			return
		}
		setLogKeyID(r.Context(), key.ID)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, Principal(key))))
	})
}

// bearerToken returns the credentials of an `Authorization: Bearer <key>`
// header. Auth schemes are case-insensitive (RFC 9110, section 11.1), so
// clients that send `bearer` are not refused.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// requireRole answers 403 unless the principal has one of roles.
func requireRole(roles ...apikeys.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := principalFrom(r.Context())
			for _, role := range roles {
				if p.Role == role {
					next.ServeHTTP(w, r)
					return
				}
			}
			writeProblem(w, problemForbidden)
		})
	}
}
