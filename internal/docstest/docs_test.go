// Package docstest runs the shell examples of the docs against a dev node,
// as a reader copies them: a page whose example no longer works, or no
// longer prints what the page says, fails here.
package docstest

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rebill/rebill/internal/dbtest"
	"github.com/rebill/rebill/internal/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

const adminKey = "rbk_docstest_0123456789abcdefghijklmnopqrstuv"

// shBlocks are the fenced sh blocks of a page, in order.
func shBlocks(t *testing.T, page string) []string {
	t.Helper()
	text, err := os.ReadFile("../../" + page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case !in && line == "```sh":
			in, cur = true, nil
		case in && line == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

var (
	serveRe   = regexp.MustCompile(`^((?:[A-Z_]+=\S+ )*)go run \./cmd/rebill serve$`)
	commentRe = regexp.MustCompile(`^(curl .*?)\s+#\s+(.*)$`)
	fieldRe   = regexp.MustCompile(`^([a-z_]+) ([A-Za-z0-9_.-]+)$`)
)

// expectation is what a page says one command prints.
type expectation struct {
	command, says string
}

// runPage runs page's blocks in one shell, in order, on a dev node of its
// own: the block that starts a node (go run ./cmd/rebill serve, with its
// variables) starts it, or the page's first block finds one started with
// REBILL_DEV=1; `export API=` and `export REBILL_KEY=` get that node's.
func runPage(t *testing.T, page string) {
	dir := t.TempDir()
	script := []string{"set -eo pipefail", `curl() { command curl -w '%{stderr}@@HTTP %{http_code}\n' "$@"; }`}
	var expects []expectation
	env := map[string]string{"REBILL_DEV": "1", "DATABASE_URL": dbtest.URL(t), "REBILL_ADMIN_KEY": adminKey}
	var startup []string
	started := false
	for _, block := range shBlocks(t, page) {
		for _, line := range strings.Split(block, "\n") {
			if m := serveRe.FindStringSubmatch(line); m != nil {
				for _, kv := range strings.Fields(m[1]) {
					k, v, _ := strings.Cut(kv, "=")
					env[k] = v
				}
				started = true
				continue
			}
			if strings.HasPrefix(line, "go test ") {
				continue // the suite this test is part of
			}
			if strings.HasPrefix(line, "export API=") || strings.HasPrefix(line, "export REBILL_KEY=") {
				continue // the node's, set below
			}
			if m := commentRe.FindStringSubmatch(line); m != nil {
				n := len(expects)
				expects = append(expects, expectation{m[1], m[2]})
				line = fmt.Sprintf("echo '@@OUT %d'; %s; echo; echo '@@END %d'", n, m[1], n)
			}
			if !started {
				startup = append(startup, line)
			} else {
				script = append(script, line)
			}
		}
	}
	if len(startup) > 0 && strings.Contains(strings.Join(startup, "\n"), "$API") {
		script = append(script[:2:2], append(startup, script[2:]...)...)
		startup = nil
	}
	if len(startup) > 0 {
		run(t, dir, nil, strings.Join(append([]string{"set -eo pipefail"}, startup...), "\n"))
	}
	p, err := proctest.Start(page, proctest.Options{Dir: dir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	if err := p.WaitReady(90 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, proctest.Tail(p.Output(), 4096))
	}
	out := run(t, dir, []string{"API=" + p.URL, "REBILL_KEY=" + adminKey}, strings.Join(script, "\n"))
	for n, e := range expects {
		_, rest, ok := strings.Cut(out, fmt.Sprintf("@@OUT %d\n", n))
		got, _, ok2 := strings.Cut(rest, fmt.Sprintf("@@END %d", n))
		if !ok || !ok2 {
			t.Errorf("%s: %q printed nothing", page, e.command)
			continue
		}
		for _, part := range strings.Split(e.says, ", ") {
			check(t, page, e, strings.TrimSpace(got), part)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if code, ok := strings.CutPrefix(line, "@@HTTP "); ok && code >= "400" {
			t.Errorf("%s: a request answered %s:\n%s", page, code, out)
		}
	}
}

// check tells whether got, a command's output, shows part of what the page
// says it prints: `field value` (a JSON field with that value) or a JSON
// beginning ending in `...`.
func check(t *testing.T, page string, e expectation, got, part string) {
	t.Helper()
	if prefix, ok := strings.CutSuffix(part, "...}"); ok {
		if !strings.HasPrefix(got, prefix) {
			t.Errorf("%s: %s\n  says it prints %s\n  printed %s", page, e.command, part, got)
		}
		return
	}
	m := fieldRe.FindStringSubmatch(part)
	if m == nil {
		t.Logf("%s: %q: %q is prose, not checked", page, e.command, part)
		return
	}
	if !strings.Contains(got, fmt.Sprintf(`"%s":"%s"`, m[1], m[2])) && !strings.Contains(got, fmt.Sprintf(`"%s":%s`, m[1], m[2])) {
		t.Errorf("%s: %s\n  says it prints %s\n  printed %s", page, e.command, part, got)
	}
}

func run(t *testing.T, dir string, env []string, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n--- script\n%s\n--- output\n%s", err, script, out)
	}
	return string(out)
}

func TestDocExamplesRun(t *testing.T) {
	t.Parallel()
	for _, page := range []string{"README.md", "docs/dev-mode.md", "docs/autopay.md", "docs/experiments.md"} {
		t.Run(page, func(t *testing.T) {
			t.Parallel()
			runPage(t, page)
		})
	}
}
