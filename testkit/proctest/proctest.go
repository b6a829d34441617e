// Package proctest runs the real rebill binary as a separate process for
// tests that need one (a crash, a signal, a fresh process' metrics, the
// embedded database): the binary is built once per test binary, started
// with an environment of the test's choosing, awaited until it is ready,
// stopped, and its output kept for the test's log.
package proctest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// build compiles cmd/rebill once per test binary.
func build() (string, error) {
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "rebill-proctest-")
		if built.err != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
			if _, serr := os.Stat(goTool); serr != nil {
				goTool = "/usr/local/go/bin/go"
			}
		}
		path := filepath.Join(built.dir, "rebill")
		out, err := exec.Command(goTool, "build", "-o", path, "github.com/rebill/rebill/cmd/rebill").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		built.path = path
	})
	return built.path, built.err
}

// Binary builds cmd/rebill (once per test binary) and returns its path.
func Binary(tb testing.TB) string {
	tb.Helper()
	path, err := build()
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// Main runs the tests and then removes the binary they built, if any:
// call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// Options are how a process is started.
type Options struct {
	// Args are the command line after the binary; nil is "serve".
	Args []string
	// Dir is the working directory (the default REBILL_DATA_DIR is
	// relative to it); empty is this process' own.
	Dir string
	// Env is set on top of this process' environment, from which every
	// REBILL_* variable and DATABASE_URL are removed; REBILL_ADDR is a
	// free loopback port unless Env sets it.
	Env map[string]string
	// OutputLimit is how many bytes of each of stdout and stderr are
	// kept, the last ones; 0 is 2 MiB.
	OutputLimit int
}

// Process is one running rebill.
type Process struct {
	Name string
	// URL is the base URL of its API (http://REBILL_ADDR).
	URL string

	cmd    *exec.Cmd
	stdout *tailBuffer
	stderr *tailBuffer
	done   chan struct{} // closed once it exited and was waited for
}

// FreePort finds a free TCP port on loopback for a process to listen on.
// It is drawn below Linux's ephemeral range (32768-60999): a port the
// kernel handed out for ":0" and that was closed again is the next one it
// hands out, often as the local port of one of the suite's many client
// connections, before the process gets to bind it.
func FreePort() (int, error) {
	const low, high = 20000, 32767
	for range 100 {
		port := low + rand.IntN(high-low+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("free port: 100 ports below the ephemeral range were taken")
}

// Start builds the binary if need be and starts it. It does not wait for
// it to be ready (WaitReady).
func Start(name string, opts Options) (*Process, error) {
	bin, err := build()
	if err != nil {
		return nil, err
	}
	addr := opts.Env["REBILL_ADDR"]
	if addr == "" {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		addr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	args := opts.Args
	if args == nil {
		args = []string{"serve"}
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = opts.Dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REBILL_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "REBILL_ADDR="+addr)
	for k, v := range opts.Env {
		if k != "REBILL_ADDR" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	limit := opts.OutputLimit
	if limit <= 0 {
		limit = 2 << 20
	}
	p := &Process{Name: name, URL: "http://" + addr, cmd: cmd,
		stdout: &tailBuffer{max: limit}, stderr: &tailBuffer{max: limit}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// StartT starts `rebill serve` with env in a temporary working directory
// of t's. It is killed when the test ends, and its output logged if the
// test failed.
func StartT(t testing.TB, name string, env map[string]string) *Process {
	t.Helper()
	p, err := Start(name, Options{Dir: t.TempDir(), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s", name, p.Stdout())
			t.Logf("%s stderr (%s):\n%s", name, p.cmd.ProcessState, Tail(p.Stderr(), 512<<10))
		}
	})
	return p
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited tells whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitState is how the process ended; nil while it runs.
func (p *Process) ExitState() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Stdout is what the process wrote to its standard output (the last
// OutputLimit bytes).
func (p *Process) Stdout() string { return p.stdout.String() }

// Stderr is what the process wrote to its standard error (the last
// OutputLimit bytes).
func (p *Process) Stderr() string { return p.stderr.String() }

// Output is both, standard output first.
func (p *Process) Output() string { return p.Stdout() + p.Stderr() }

// WaitReady waits until GET /readyz answers 200 (the node took its
// database and started its workers, not only its listener).
func (p *Process) WaitReady(limit time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited before it was ready: %s\n%s", p.Name, p.cmd.ProcessState, Tail(p.Output(), 64<<10))
		}
		res, err := client.Get(p.URL + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s (last: %v)", p.Name, limit, err)
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ErrStillRunning: the process did not exit in time.
var ErrStillRunning = errors.New("process still running")

// Terminate sends SIGTERM and waits up to limit for the process to exit;
// returns how long it took, and an error unless it exited with code 0.
func (p *Process) Terminate(limit time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("SIGTERM %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
	case <-time.After(limit):
		return time.Since(start), fmt.Errorf("%w: %s %s after SIGTERM", ErrStillRunning, p.Name, limit)
	}
	took := time.Since(start)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return took, fmt.Errorf("%s exit: %s", p.Name, p.cmd.ProcessState)
	}
	return took, nil
}

// Kill sends SIGKILL and waits up to 10 s for the process to be gone.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGKILL %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%w: %s 10s after SIGKILL", ErrStillRunning, p.Name)
	}
}

// Tail is the last n bytes of s, marked as cut when it was.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
