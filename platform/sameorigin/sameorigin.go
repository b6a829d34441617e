// Package sameorigin is the one judgement, shared by the support console
// and River UI, of whether a browser sent a request from the page's own
// origin. Both rely on credentials a browser attaches by itself (a session
// cookie, cached HTTP Basic credentials), so a page on another site could
// otherwise make a person's browser act for it.
package sameorigin

import (
	"net/http"
	"net/url"
	"strings"
)

// Request reports whether r may be a state-changing request: false when
// the browser says it came from another site. Sec-Fetch-Site (sent by
// every current browser, and not settable by a page) must be absent,
// same-origin or none (typed by the person); Origin, when present, must be
// an http(s) origin naming the host the request was sent to. A client that
// is no browser sends neither and passes: it has no ambient credentials
// for another site to borrow.
func Request(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}
