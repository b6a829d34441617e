package api

import (
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// change answers a POST on /v1/<objects>/{id}/<action>: it decodes the
// body into Req (struct{} for an empty one), runs do on the object the
// path names in the request's transaction, and answers 200 with what do
// returns as show presents it. Every state change of the API goes through
// here, so that they all refuse a bad body, a bad id and a refused move
// the same way and in the same order.
func change[Req, T, J any](s *Server, w http.ResponseWriter, r *http.Request, show func(T) J,
	do func(tx pgx.Tx, id uuid.UUID, req Req) (T, error)) {
	var req Req
	tx, ok := s.decodeInTx(w, r, &req)
	if !ok {
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := do(tx, id, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, show(v))
}

// listPage answers a cursor-paged GET: it reads ?limit= and ?cursor=
// (parsed by cursor; the zero C for the first page), fetches limit+1
// items from there, and answers the page as show presents its items, next
// naming the cursor that continues after an item. Every list of the API
// goes through here, so that they all page, and refuse a cursor, alike.
func listPage[C, T, J any](s *Server, w http.ResponseWriter, r *http.Request, cursor func(string) (C, bool),
	fetch func(from C, limit int) ([]T, error), show func(T) J, next func(T) string) {
	pg, err := pageParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var from C
	if pg.cursor != "" {
		c, ok := cursor(pg.cursor)
		if !ok {
			s.fail(w, r, errBadCursor)
			return
		}
		from = c
	}
	items, err := fetch(from, pg.limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list(items, pg.limit, show, next))
}

// underPath is fetch for a list under /v1/<objects>/{id}/: the path's id
// is read after the page parameters, so a bad cursor is reported first.
func underPath[C, T any](r *http.Request, fetch func(id uuid.UUID, from C, limit int) ([]T, error)) func(C, int) ([]T, error) {
	return func(from C, limit int) ([]T, error) {
		id, err := pathID(r)
		if err != nil {
			return nil, err
		}
		return fetch(id, from, limit)
	}
}

// idCursor reads a cursor that is an object's id.
func idCursor(c string) (uuid.UUID, bool) {
	id, err := parseID(c)
	return id, err == nil
}

// seqCursor reads a cursor that is a sequence number, least or more (0 or 1: where the numbering starts).
func seqCursor(least int64) func(string) (int64, bool) {
	return func(c string) (int64, bool) {
		n, err := strconv.ParseInt(c, 10, 64)
		return n, err == nil && n >= least
	}
}

func encodeCursor(s string) *string {
	c := base64.RawURLEncoding.EncodeToString([]byte(s))
	return &c
}

type listJSON[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// list encodes one page of items fetched with limit+1: the extra item, if
// any, says there is a next page, whose cursor names the page's last item.
func list[T, J any](items []T, limit int, encode func(T) J, cursor func(T) string) listJSON[J] {
	out := listJSON[J]{Data: []J{}}
	for i, item := range items {
		if i == limit {
			out.NextCursor = encodeCursor(cursor(items[i-1]))
			break
		}
		out.Data = append(out.Data, encode(item))
	}
	return out
}
