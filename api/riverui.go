package api

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"path"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/platform/sameorigin"
)

// problemCrossSite answers a state-changing River UI request whose Basic
// credentials a browser sent for a page on another site.
var problemCrossSite = newProblem(http.StatusForbidden, "forbidden", "Forbidden",
	"A request authenticated by HTTP Basic that changes jobs or queues must come from River UI's own page; a script sends its key as a Bearer header.")

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
//
// A browser caches Basic credentials and sends them with any request to
// the origin, also one a page on another site makes it send (a form, or a
// fetch with a text/plain body, which needs no preflight). So a request
// authenticated by Basic that is not GET or HEAD must come from River UI's
// own page, judged as the console judges its forms (sameorigin); a Bearer
// header is never sent by a browser on its own, so scripts keep working.
// Every answer forbids framing, so that no other site can overlay River
// UI's buttons (clickjacking).
func (s *Server) riverUI(ui http.Handler) http.Handler {
	ui = riverUIFileTypes(ui)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		readOnly := r.Method == http.MethodGet || r.Method == http.MethodHead
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			_, token, ok = r.BasicAuth()
			if ok && !readOnly && !sameorigin.Request(r) {
				writeProblem(w, problemCrossSite)
				return
			}
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
		switch {
		case key.Role == apikeys.Admin, key.Role == apikeys.Support && readOnly:
			ui.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, Principal(key))))
		default:
			writeProblem(w, problemForbidden)
		}
	})
}

// redirectToRiverUI sends /riverui, the address people type, to River
// UI's page at /riverui/. It needs no key: it reveals only where the page
// is, which the served OpenAPI document says anyway.
func redirectToRiverUI(w http.ResponseWriter, r *http.Request) {
	target := "/riverui/"
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", target)
	w.WriteHeader(http.StatusMovedPermanently)
}

// sniffedTypes are the content types http.DetectContentType falls back
// to when the bytes say little: plain text, XML, unknown binary.
var sniffedTypes = map[string]bool{"text/plain": true, "text/xml": true, "application/octet-stream": true}

// riverUIFileTypes corrects the content type of River UI's static files.
// River UI names the type of its public files (favicon, icons) from their
// first bytes, which reads its SVG icon as text/plain, and a browser does
// not show that as an icon. Where River UI answered with such a guessed
// type, the type of the file's extension is sent instead; a specific type
// (its HTML page, served for any unknown path) is left alone.
func riverUIFileTypes(ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		byExt := mime.TypeByExtension(path.Ext(r.URL.Path))
		if byExt == "" {
			ui.ServeHTTP(w, r)
			return
		}
		ui.ServeHTTP(&fileTypeWriter{ResponseWriter: w, byExt: byExt}, r)
	})
}

type fileTypeWriter struct {
	http.ResponseWriter
	byExt       string
	wroteHeader bool
}

func (w *fileTypeWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		h := w.Header()
		sent := h.Get("Content-Type")
		got, _, err := mime.ParseMediaType(sent)
		want, _, _ := mime.ParseMediaType(w.byExt)
		guessed := sent == "" || err == nil && sniffedTypes[got] && got != want
		if code == http.StatusOK && guessed {
			h.Set("Content-Type", w.byExt)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *fileTypeWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *fileTypeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
