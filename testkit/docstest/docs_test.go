// Package docstest runs the shell examples of the docs against a dev node,
// as a reader copies them: a page whose example no longer works, or no
// longer prints what the page says, fails here.
package docstest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

const adminKey = "rbk_docstest_0123456789abcdefghijklmnopqrstuv"

// notRunRe marks, on the line before its fence, a block that cannot run
// on a dev node (production credentials, a build, the test suite itself):
// <!-- docs-test: not run (why) -->.
var notRunRe = regexp.MustCompile(`^<!-- docs-test: not run \(.+\) -->$`)

// block is one fenced sh block of a page.
type block struct {
	text   string
	notRun bool
}

// shBlocks are the fenced sh blocks of a page, in order.
func shBlocks(t *testing.T, page string) []block {
	t.Helper()
	text, err := os.ReadFile("../../" + page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur []string
	in, marked, prev := false, false, ""
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case !in && line == "```sh":
			in, cur, marked = true, nil, notRunRe.MatchString(prev)
		case in && line == "```":
			in = false
			blocks = append(blocks, block{strings.Join(cur, "\n"), marked})
		case in:
			cur = append(cur, line)
		}
		prev = line
	}
	return blocks
}

var (
	serveRe   = regexp.MustCompile(`^((?:[A-Z_]+=\S+ )*)go run \./cmd/rebill serve$`)
	commentRe = regexp.MustCompile(`^([a-z][^#]*?)\s+#\s+(.*)$`)
	fieldRe   = regexp.MustCompile(`^([a-z_][a-z0-9_]*) ([A-Za-z0-9_.-]+)$`)
)

// expectation is what a page says one command prints.
type expectation struct {
	command, says string
}

// runPage runs page's blocks in one shell, in order, on a dev node of its
// own: the block that starts a node (go run ./cmd/rebill serve, with its
// variables) starts it, or the page's first block finds one started with
// REBILL_DEV=1; `export API=` and `export REBILL_KEY=` get that node's.
func runPage(t *testing.T, page string, after ...string) {
	dir := t.TempDir()
	// The shell's background jobs (a page's receiver) end with it.
	script := []string{"set -eo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",
		`curl() { command curl -w '%{stderr}@@HTTP %{http_code}\n' "$@"; }`}
	var expects []expectation
	// A node's pool at its least: the suite shares one PostgreSQL.
	env := map[string]string{"REBILL_DEV": "1", "DATABASE_URL": dbtest.URL(t), "REBILL_ADMIN_KEY": adminKey, "REBILL_DB_MAX_CONNS": "8"}
	var startup []string
	started := false
	var blocks []block
	for _, p := range append(after, page) {
		blocks = append(blocks, shBlocks(t, p)...)
	}
	for _, b := range blocks {
		if b.notRun {
			continue // TestDocExamplesThatCannotRun checks it
		}
		for _, line := range strings.Split(b.text, "\n") {
			if m := serveRe.FindStringSubmatch(line); m != nil {
				for _, kv := range strings.Fields(m[1]) {
					k, v, _ := strings.Cut(kv, "=")
					env[k] = v
				}
				started = true
				continue
			}
			if strings.HasPrefix(line, "export API=") || strings.HasPrefix(line, "export REBILL_KEY=") {
				continue // the node's, set below
			}
			if m := commentRe.FindStringSubmatch(line); m != nil {
				n := len(expects)
				expects = append(expects, expectation{m[1], m[2]})
				line = fmt.Sprintf("for try in $(seq 1 360); do out=$(%s); %s && break; sleep 0.25; done; echo '@@OUT %d'; echo \"$out\"; echo '@@END %d'",
					m[1], shellCheck(m[2]), n, n)
			}
			if !started {
				startup = append(startup, line)
			} else {
				script = append(script, line)
			}
		}
	}
	if !started { // no block starts the node: the page's commands all need it
		script = append(script[:3:3], append(startup, script[3:]...)...)
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
	// The page's shell has the node's environment, and rebill on its PATH,
	// as an operator's has.
	shellEnv := []string{"API=" + p.URL, "REBILL_KEY=" + adminKey,
		"PATH=" + filepath.Dir(proctest.Binary(t)) + string(os.PathListSeparator) + os.Getenv("PATH")}
	for k, v := range env {
		shellEnv = append(shellEnv, k+"="+v)
	}
	out := run(t, dir, shellEnv, strings.Join(script, "\n"))
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
			break
		}
	}
}

// shellCheck is a bash condition on $out that holds once it shows what a
// page says: the page sleeps a fixed while before reading a result, which a
// busy machine may outlast, so its reads are repeated (90 s at most) until
// they show it, and check judges the last.
func shellCheck(says string) string {
	conds := []string{"true"}
	for _, part := range strings.Split(says, ", ") {
		if prefix, ok := strings.CutSuffix(part, "...}"); ok {
			conds = append(conds, fmt.Sprintf("[[ \"$out\" == %s* ]]", shellQuote(prefix)))
		} else if m := fieldRe.FindStringSubmatch(part); m != nil {
			conds = append(conds, fmt.Sprintf("grep -qE %s <<<\"$out\"", shellQuote(fmt.Sprintf(`"%s":"?%s[",}]`, m[1], regexp.QuoteMeta(m[2])))))
		}
	}
	return strings.Join(conds, " && ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

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
	cmd.WaitDelay = 10 * time.Second // a background job the trap missed holds the pipe no longer
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n--- script\n%s\n--- output\n%s", err, script, out)
	}
	return string(out)
}

// runnable are the pages whose examples run on a dev node, each with the
// pages it continues (run first, in the same shell); every other page's sh
// blocks are marked not run.
var runnable = map[string][]string{
	"README.md":                    nil,
	"docs/dev-mode.md":             nil,
	"docs/autopay.md":              nil,
	"docs/experiments.md":          nil,
	"docs/webhooks.md":             {"README.md"}, // $SUB
	"docs/operations.md":           nil,
	"docs/security.md":             nil,
	"docs/refunds.md":              nil,
	"docs/subscription-changes.md": nil,
	"docs/trials.md":               nil,
}

// The pages run one after the other: each has a node, and the suite shares
// the machine and one PostgreSQL with every other package's tests.
func TestDocExamplesRun(t *testing.T) {
	t.Parallel()
	for page, after := range runnable {
		t.Run(page, func(t *testing.T) { runPage(t, page, after...) })
	}
}

var settingRe = regexp.MustCompile(`\b((?:REBILL|OTEL)_[A-Z_]+|DATABASE_URL)=`)

// pageVariables are the docs' own shell variables, not settings of rebill.
var pageVariables = map[string]bool{"REBILL_KEY": true}

// A block that cannot run on a dev node is at least valid shell, and every
// setting it sets is one `rebill serve --help` lists; a page with examples
// that is not run at all has every block marked so.
func TestDocExamplesThatCannotRun(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	config.PrintHelp(&help)
	settings := map[string]bool{}
	for _, line := range strings.Split(help.String(), "\n") {
		if name, _, ok := strings.Cut(line, " "); ok {
			settings[name] = true
		}
	}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../../README.md")
	for _, path := range pages {
		page := strings.TrimPrefix(path, "../../")
		for i, b := range shBlocks(t, page) {
			if !b.notRun {
				if _, ok := runnable[page]; !ok {
					t.Errorf("%s: block %d is neither run (the page is not in runnable) nor marked <!-- docs-test: not run (why) -->", page, i+1)
				}
				continue
			}
			cmd := exec.Command("bash", "-n")
			cmd.Stdin = strings.NewReader(b.text)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: block %d is not valid shell: %v\n%s", page, i+1, err, out)
			}
			for _, m := range settingRe.FindAllStringSubmatch(b.text, -1) {
				if !settings[m[1]] && !pageVariables[m[1]] && !strings.HasPrefix(m[1], "OTEL_") {
					t.Errorf("%s: block %d sets %s, which is no setting of rebill serve --help", page, i+1, m[1])
				}
			}
		}
	}
}
