package api

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/validate"
	"github.com/rebill/rebill/rebilltype"
)

// cardNumberError: a request field holds what looks like a card number.
type cardNumberError struct{ field string }

func (e *cardNumberError) Error() string { return e.field + ": looks like a card number" }

func (*cardNumberError) ErrorCode() fault.Code { return fault.Invalid }

// errUnknownID: a path id that names no object, because it is not an id
// in the form this API writes.
var errUnknownID = fault.New(fault.NotFound, "no such id")

// errNoRequestTx: a POST handler ran outside the idempotency middleware.
var errNoRequestTx = errors.New("request transaction missing")

// decodeBody reads a JSON request body strictly, refusing card numbers in
// any field. Returns validate.ErrBodyTooLarge, a *cardNumberError, a
// *validate.DecodeError or rebilltype.Errors.
func decodeBody(r *http.Request, dst any) error {
	body, err := validate.ReadBody(r.Body)
	if errors.Is(err, validate.ErrBodyTooLarge) {
		return err
	}
	if err != nil {
		return rebilltype.Errors{{Field: "", Message: "the body could not be read"}}
	}
	if field, found := validate.FindCardNumber(body); found {
		return &cardNumberError{field: field}
	}
	if err := validate.Decode(body, dst); err != nil {
		var decodeErr *validate.DecodeError
		if errors.As(err, &decodeErr) {
			return decodeErr
		}
		return rebilltype.Errors{{Field: "", Message: err.Error()}}
	}
	return nil
}

// decodeInTx decodes a POST's body into dst and returns the transaction the
// request executes in (see package idempotency), or writes the error.
func (s *Server) decodeInTx(w http.ResponseWriter, r *http.Request, dst any) (pgx.Tx, bool) {
	if err := decodeBody(r, dst); err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	tx, ok := idempotency.Tx(r.Context())
	if !ok {
		s.fail(w, r, errNoRequestTx)
	}
	return tx, ok
}

// parseID reads an id from a URL or a cursor. Only the form the API writes
// (36 characters, lower case, hyphenated) is an id: uuid.Parse also takes
// braces, urn:uuid:, upper case and no hyphens, which would give one object
// many URLs, and so many keys in caches, logs and rate limits.
func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil || id.String() != s {
		return uuid.UUID{}, errUnknownID
	}
	return id, nil
}

// pathID is the {id} of the route.
func pathID(r *http.Request) (uuid.UUID, error) { return parseID(chi.URLParam(r, "id")) }

// page is a list request's ?limit= and ?cursor=.
type page struct {
	limit  int
	cursor string // decoded; empty for the first page
}

var errBadCursor = rebilltype.Errors{{Field: "cursor", Message: "is not a cursor this API returned"}}

// pageParams parses ?limit= (1..100, default 20) and ?cursor=. Returns
// rebilltype.Errors.
func pageParams(r *http.Request) (page, error) {
	p := page{limit: 20}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return page{}, rebilltype.Errors{{Field: "limit", Message: "must be an integer 1..100"}}
		}
		p.limit = n
	}
	if v := r.URL.Query().Get("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(raw) == 0 {
			return page{}, errBadCursor
		}
		p.cursor = string(raw)
	}
	return p, nil
}

func requestID(r *http.Request) string { return middleware.GetReqID(r.Context()) }
