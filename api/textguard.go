package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/rebill/rebill/platform/validate"
)

// refuseCardNumbers answers 400 card-number-refused when a path parameter,
// a query parameter or the Idempotency-Key looks like a card number. It
// runs after routing and the decoding of the path parameters and before the
// idempotency middleware, which would store the key, and before any handler
// reads them. Bodies are searched by decodeBody.
func refuseCardNumbers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if field, found := cardNumberOutsideBody(r); found {
			writeProblem(w, cardNumberProblem(field))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cardNumberOutsideBody names the first path parameter, query parameter or
// header that looks like a card number.
func cardNumberOutsideBody(r *http.Request) (field string, found bool) {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		for i, name := range rc.URLParams.Keys {
			if validate.LooksLikeCardNumber(rc.URLParams.Values[i]) {
				return name, true
			}
		}
	}
	if field, found := validate.FindCardNumberInQuery(r.URL.Query()); found {
		return field, true
	}
	for _, v := range r.Header.Values("Idempotency-Key") {
		if validate.LooksLikeCardNumber(v) {
			return "Idempotency-Key", true
		}
	}
	return "", false
}
