package sameorigin_test

import (
	"net/http/httptest"
	"testing"

	"github.com/rebill/rebill/platform/sameorigin"
)

// What a browser says about where a request came from decides; a request
// with neither header (curl, a script) passes.
func TestRequest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, site, origin string
		want               bool
	}{
		{"no browser headers", "", "", true},
		{"same origin", "same-origin", "https://rebill.example", true},
		{"typed by the person", "none", "", true},
		{"same origin, host case", "", "https://REBILL.example", true},
		{"cross-site", "cross-site", "", false},
		{"same-site sibling", "same-site", "https://other.rebill.example", false},
		{"another origin", "", "https://evil.example", false},
		{"another port", "", "https://rebill.example:8443", false},
		{"opaque origin", "", "null", false},
		{"not http", "", "ftp://rebill.example", false},
		{"cross-site despite origin", "cross-site", "https://rebill.example", false},
		{"unknown Sec-Fetch-Site", "sideways", "", false},
	} {
		r := httptest.NewRequest("POST", "https://rebill.example/riverui/api/jobs/retry", nil)
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := sameorigin.Request(r); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
