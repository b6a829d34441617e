package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/platform/sameorigin"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

// CookieName is the session cookie.
const CookieName = "rebill_console"

// session is a logged-in console user.
type session struct {
	idHash   []byte
	csrf     string
	key      apikeys.Key
	timeZone string
	loc      *time.Location
}

// caller is the session's key as the use cases see it: the actor of the
// events its actions cause, exactly as the API records it.
func (s session) caller() usecases.Caller {
	return usecases.Caller{Actor: subscriptions.Actor{ID: s.key.ID, Role: string(s.key.Role)}, CustomerID: s.key.CustomerID}
}

func randomID() string {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		panic(fmt.Sprintf("console: read random: %v", err)) // the platform's CSPRNG failing leaves nothing safe to do
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}

func hashID(id string) []byte {
	sum := sha256.Sum256([]byte("rebill-console-session\x00" + id))
	return sum[:]
}

// csrfToken is derived from the session id, which only the cookie holds:
// a page from elsewhere can neither read nor compute it, and the database
// (which holds another hash of the id) does not reveal it.
func csrfToken(id string) string {
	sum := sha256.Sum256([]byte("rebill-console-csrf\x00" + id))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// secure reports whether the browser reached rebill over HTTPS.
func (h *Handler) secure(r *http.Request) bool {
	return r.TLS != nil || h.opts.TrustProxy && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: value, Path: "/console/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.secure(r)})
}

// startSession stores a new session of key and sets its cookie.
func (h *Handler) startSession(ctx context.Context, w http.ResponseWriter, r *http.Request, token string, key apikeys.Key) error {
	now := h.opts.Now()
	// Sessions that ended are removed as new ones begin: the table stays
	// as small as the staff.
	if _, err := h.opts.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE last_seen_at <= $1 OR created_at <= $2`,
		now.Add(-h.opts.IdleTimeout), now.Add(-h.opts.MaxAge)); err != nil {
		return fmt.Errorf("remove ended console sessions: %w", err)
	}
	id := randomID()
	if _, err := h.opts.Pool.Exec(ctx, `INSERT INTO console_sessions (id_hash, key_hash, key_id, role, created_at, last_seen_at)
		VALUES ($1, $2, $3, $4, $5, $5)`, hashID(id), apikeys.Fingerprint(token), key.ID, string(key.Role), now); err != nil {
		return fmt.Errorf("store console session: %w", err)
	}
	h.setCookie(w, r, id, int(h.opts.MaxAge.Seconds()))
	return nil
}

var errNoSession = errors.New("no console session")

// loadSession returns the request's live session and marks it seen.
// Returns errNoSession when there is none, or it ended: idle too long,
// older than MaxAge, or its key is gone.
func (h *Handler) loadSession(ctx context.Context, r *http.Request) (session, error) {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return session{}, errNoSession
	}
	s := session{idHash: hashID(c.Value), csrf: csrfToken(c.Value)}
	now := h.opts.Now()
	var keyHash []byte
	err = h.opts.Pool.QueryRow(ctx, `UPDATE console_sessions SET last_seen_at = $2
		WHERE id_hash = $1 AND last_seen_at > $3 AND created_at > $4
		RETURNING key_hash, time_zone`, s.idHash, now, now.Add(-h.opts.IdleTimeout), now.Add(-h.opts.MaxAge)).
		Scan(&keyHash, &s.timeZone)
	if errors.Is(err, pgx.ErrNoRows) {
		return session{}, h.endSession(ctx, s.idHash)
	}
	if err != nil {
		return session{}, fmt.Errorf("read console session: %w", err)
	}
	s.key, err = h.opts.Keys.ByFingerprint(ctx, keyHash)
	if errors.Is(err, apikeys.ErrUnauthenticated) || err == nil && s.key.Role != apikeys.Admin && s.key.Role != apikeys.Support {
		return session{}, h.endSession(ctx, s.idHash)
	}
	if err != nil {
		return session{}, err
	}
	s.loc = loadZone(s.timeZone)
	return s, nil
}

// endSession deletes a session and returns errNoSession (or why it could
// not be deleted).
func (h *Handler) endSession(ctx context.Context, idHash []byte) error {
	if _, err := h.opts.Pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("end console session: %w", err)
	}
	return errNoSession
}

type sessionKey struct{}

func sessionFrom(ctx context.Context) session {
	s, _ := ctx.Value(sessionKey{}).(session)
	return s
}

// requireSession sends a request without a live session to the login
// page (saying so when a session cookie came with it).
func (h *Handler) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := h.loadSession(r.Context(), r)
		if errors.Is(err, errNoSession) {
			target := "/console/login"
			if _, cerr := r.Cookie(CookieName); cerr == nil {
				h.setCookie(w, r, "", -1)
				target += "?ended=1"
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		if err != nil {
			h.opts.Logger.Error().Err(err).Msg("console session")
			h.renderError(w, r, nil, http.StatusServiceUnavailable, "The console cannot read its sessions right now; try again shortly.")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	})
}

// checkForm guards every state-changing request: a POST must carry the
// session's CSRF token, and a browser's Origin or Sec-Fetch-Site must not
// name another site.
func (h *Handler) checkForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		s := sessionFrom(r.Context())
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		token := r.PostFormValue("csrf")
		if !sameorigin.Request(r) || token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(s.csrf)) != 1 {
			h.renderError(w, r, &s, http.StatusForbidden, "Invalid form token: reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminOnly answers 403 to a support key.
func (h *Handler) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := sessionFrom(r.Context()); s.key.Role != apikeys.Admin {
			h.renderError(w, r, &s, http.StatusForbidden, "Only an admin key may do this.")
			return
		}
		next.ServeHTTP(w, r)
	})
}
