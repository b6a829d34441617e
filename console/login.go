package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/platform/sameorigin"
)

type loginData struct {
	Ended   bool
	Message string
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, err := h.loadSession(r.Context(), r); err == nil {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	h.render(w, r, nil, http.StatusOK, "login", "Log in", loginData{Ended: r.URL.Query().Get("ended") != ""})
}

// login opens a session for a staff key. A wrong key waits as long as
// earlier failures from the same address and key prefix require.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !sameorigin.Request(r) {
		h.render(w, r, nil, http.StatusForbidden, "login", "Log in", loginData{Message: "Invalid form token: this form was not sent from the console."})
		return
	}
	token := strings.TrimSpace(r.PostFormValue("api_key"))
	addr := h.clientAddr(r)
	if d := h.throttle.delay(addr, token); d > 0 {
		if err := h.opts.Sleep(r.Context(), d); err != nil {
			return
		}
	}
	key, err := h.opts.Keys.Authenticate(r.Context(), token)
	switch {
	case errors.Is(err, apikeys.ErrUnauthenticated):
		h.throttle.failed(addr, token)
		h.render(w, r, nil, http.StatusUnauthorized, "login", "Log in", loginData{Message: "Unknown API key."})
		return
	case err != nil:
		h.opts.Logger.Error().Err(err).Msg("console login")
		h.render(w, r, nil, http.StatusServiceUnavailable, "login", "Log in", loginData{Message: "Keys cannot be checked right now; try again shortly."})
		return
	case key.Role == apikeys.Customer:
		// A real key, so no guess to slow down; the customer has the API.
		h.render(w, r, nil, http.StatusForbidden, "login", "Log in",
			loginData{Message: "Customer keys cannot use the console: it is for support and admin keys. Customers use the API."})
		return
	}
	h.throttle.succeeded(addr, token)
	if err := h.startSession(r.Context(), w, r, token, key); err != nil {
		h.opts.Logger.Error().Err(err).Msg("console login")
		h.render(w, r, nil, http.StatusServiceUnavailable, "login", "Log in", loginData{Message: "The session could not be stored; try again shortly."})
		return
	}
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	if err := h.endSession(r.Context(), s.idHash); !errors.Is(err, errNoSession) {
		h.opts.Logger.Error().Err(err).Msg("console logout")
		h.renderError(w, r, &s, http.StatusServiceUnavailable, "The session could not be ended; try again shortly.")
		return
	}
	h.setCookie(w, r, "", -1)
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}
