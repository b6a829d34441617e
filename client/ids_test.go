package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/client"
)

// An id read from one response goes back into the next call as it is, to
// the path of that resource, and a refusal is a *Problem as everywhere.
func TestIDFromAResponseGoesBack(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d")
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		if r.URL.Path == "/v1/charges/"+id.String() {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"https://rebill.dev/problems/not-found","title":"Not found","status":404}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"` + id.String() + `","customer_id":"cust-42","status":"active"}`))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, "k")
	ctx := context.Background()

	sub, err := c.Subscription(ctx, id)
	require.NoError(t, err)
	require.Equal(t, id, sub.Id)
	enr, err := c.Enrollment(ctx, sub.Id)
	require.NoError(t, err)
	require.Equal(t, id, enr.Id)
	_, err = c.Charge(ctx, enr.Id)
	var p *client.Problem
	require.True(t, errors.As(err, &p), "%v", err)
	require.Equal(t, client.ProblemNotFound, p.Slug())
	require.Equal(t, []string{"/v1/subscriptions/" + id.String(), "/v1/enrollments/" + id.String(), "/v1/charges/" + id.String()}, paths)
}
