package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/rebill/rebill/apikeys"
)

// riverUIRealm is the Basic realm a browser shows when it asks for the
// key: River UI is a browser application, which cannot send a Bearer
// header by itself.
const riverUIRealm = `Basic realm="rebill River UI", charset="UTF-8"`

// riverUI guards River UI (jobs, queues, their arguments and errors):
// staff only, and read-only for support. River UI has no auth of its own,
// and its API can cancel, retry and delete jobs, so a support key reaches
// it with GET and HEAD only; every other method is 403 before River UI
// sees it. The key comes as a Bearer header or as the password of HTTP
// Basic (any user name).
func (s *Server) riverUI(ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			_, token, ok = r.BasicAuth()
		}
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", riverUIRealm)
			writeProblem(w, problemUnauthorized)
			return
		}
		key, err := s.Keys.Authenticate(r.Context(), token)
		if errors.Is(err, apikeys.ErrUnauthenticated) {
			w.Header().Set("WWW-Authenticate", riverUIRealm)
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
		readOnly := r.Method == http.MethodGet || r.Method == http.MethodHead
		switch {
		case key.Role == apikeys.Admin, key.Role == apikeys.Support && readOnly:
			ui.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, Principal(key))))
		default:
			writeProblem(w, problemForbidden)
		}
	})
}
