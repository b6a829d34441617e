package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/rebill/rebill/platform/validate"
)

// requestIDHeader carries the request's id both ways: a client may send
// one to find its request in rebill's logs, and every response names the
// id rebill used.
const requestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds a client's request id: room for a UUID, a ULID
// or a trace id with a prefix, and no room to fill a log line.
const maxRequestIDLen = 64

// requestIDs gives every request the id its log lines carry, and answers
// it in X-Request-Id. A client's X-Request-Id is kept only if it is
// 1..maxRequestIDLen characters of [A-Za-z0-9._:-] and does not look like
// a card number; anything else (a 100 KB header, control characters that
// would forge log lines, a card number pasted by mistake) is replaced by
// an id rebill makes, and the header as sent is neither logged nor passed
// on. Replacing rather than refusing keeps a request's fate independent
// of a header that exists only for tracing.
func requestIDs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent := r.Header.Values(requestIDHeader)
		var id string
		if len(sent) == 1 && acceptableRequestID(sent[0]) {
			id = sent[0]
		} else {
			id = uuid.NewString()
		}
		w.Header().Set(requestIDHeader, id)
		ctx := context.WithValue(r.Context(), middleware.RequestIDKey, id)
		if len(sent) > 0 && sent[0] != id {
			r = r.Clone(ctx)
			r.Header.Del(requestIDHeader)
		} else {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

func acceptableRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := range len(id) {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return !validate.LooksLikeCardNumber(id)
}
