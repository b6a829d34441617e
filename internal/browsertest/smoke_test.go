//go:build browser

package browsertest

import "testing"

func TestSmoke(t *testing.T) {
	n := startDevNode(t, nil)
	b := newTab(t, n)
	if s := b.open("/healthz"); s != 200 {
		t.Fatalf("status %d", s)
	}
	t.Log(b.body(), b.path())
	id, _ := n.createKey("support", "")
	t.Log(id)
}
