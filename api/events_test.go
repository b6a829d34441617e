package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func eventTypes(t *testing.T, res response) []string {
	t.Helper()
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var out []string
	for _, e := range res.json(t)["data"].([]any) {
		out = append(out, e.(map[string]any)["type"].(string))
	}
	return out
}

// Each transition publishes one event, newest first, with the object as
// its GET returns it then; a repeated pause publishes nothing.
func TestPublishedEventsFollowTransitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "create-1", createBody)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	id := res.json(t)["id"].(string)

	paused := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "pause-1", `{}`)
	require.Equal(t, http.StatusOK, paused.status)
	again := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "pause-2", `{}`)
	require.Equal(t, http.StatusOK, again.status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/resume", adminKey, "resume-1", `{}`).status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/cancel", adminKey, "cancel-1",
		`{"at_period_end":true}`).status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/cancel", adminKey, "cancel-2", `{}`).status)

	list := b.do(t, http.MethodGet, "/v1/events?object_id="+id, adminKey, "", "")
	require.Equal(t, []string{"subscription.cancelled", "subscription.cancel_scheduled", "subscription.resumed",
		"subscription.paused", "subscription.created"}, eventTypes(t, list))

	only := b.do(t, http.MethodGet, "/v1/events?type=subscription.paused", adminKey, "", "")
	require.Equal(t, []string{"subscription.paused"}, eventTypes(t, only))
	event := only.json(t)["data"].([]any)[0].(map[string]any)
	require.Regexp(t, `^evt_[0-9a-f-]{36}$`, event["id"])

	// data.object is the subscription as the pause returned it.
	var want, got any
	require.NoError(t, json.Unmarshal(paused.body, &want))
	raw, err := json.Marshal(event["data"].(map[string]any)["object"])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, want, got)

	one := b.do(t, http.MethodGet, "/v1/events/"+event["id"].(string), adminKey, "", "")
	require.Equal(t, http.StatusOK, one.status, string(one.body))
	require.Equal(t, event["id"], one.json(t)["id"])

	// Paging: one per page, newest first, then the end.
	page := b.do(t, http.MethodGet, "/v1/events?object_id="+id+"&limit=4", adminKey, "", "")
	require.Len(t, eventTypes(t, page), 4)
	cursor := page.json(t)["next_cursor"].(string)
	last := b.do(t, http.MethodGet, "/v1/events?object_id="+id+"&limit=4&cursor="+cursor, adminKey, "", "")
	require.Equal(t, []string{"subscription.created"}, eventTypes(t, last))
	require.Nil(t, last.json(t)["next_cursor"])

	require.Equal(t, http.StatusBadRequest, b.do(t, http.MethodGet, "/v1/events?type=charge.exploded", adminKey, "", "").status)
	require.Equal(t, http.StatusBadRequest, b.do(t, http.MethodGet, "/v1/events?object_id=nope", adminKey, "", "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/events/evt_nope", adminKey, "", "").status)
}

// A customer key sees its own customer's events only.
func TestPublishedEventsOwnership(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mine := b.newKey(t, "customer", "cust-1")
	support := b.newKey(t, "support", "")
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "c1", createBodyFor("cust-1")).status)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "c2", createBodyFor("cust-2"))
	require.Equal(t, http.StatusCreated, res.status)
	other := res.json(t)["id"].(string)

	require.Equal(t, []string{"subscription.created"}, eventTypes(t, b.do(t, http.MethodGet, "/v1/events", mine, "", "")))
	require.Empty(t, eventTypes(t, b.do(t, http.MethodGet, "/v1/events?object_id="+other, mine, "", "")))
	all := b.do(t, http.MethodGet, "/v1/events?object_id="+other, support, "", "")
	require.Equal(t, []string{"subscription.created"}, eventTypes(t, all))
	otherEvent := all.json(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/events/"+otherEvent, mine, "", "").status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/events/"+otherEvent, support, "", "").status)
}
