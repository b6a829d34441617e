package soak_test

// The processes under test: the real rebill binary, started and killed
// like internal/app's process tests do, and an HTTP client that drives
// them the way a careful integrator would (every POST under its own
// Idempotency-Key, retried with the same key until rebill gives a
// definite answer).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var soakBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// binary builds cmd/rebill once per test process.
func binary(t testing.TB) string {
	t.Helper()
	soakBin.once.Do(func() {
		soakBin.dir, soakBin.err = os.MkdirTemp("", "rebill-soak-")
		if soakBin.err != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = "/usr/local/go/bin/go"
		}
		path := filepath.Join(soakBin.dir, "rebill")
		out, err := exec.Command(goTool, "build", "-o", path, "github.com/rebill/rebill/cmd/rebill").CombinedOutput()
		if err != nil {
			soakBin.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		soakBin.path = path
	})
	if soakBin.err != nil {
		t.Fatal(soakBin.err)
	}
	return soakBin.path
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

// proc is one running `rebill serve`.
type proc struct {
	name string
	cmd  *exec.Cmd
	url  string
	out  *tailBuffer
	done chan struct{}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startProc starts `rebill serve` with env on top of this process'
// environment minus every REBILL_* and DATABASE_URL.
func startProc(bin, dir, name string, env map[string]string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "serve")
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REBILL_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "REBILL_ADDR="+addr)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{name: name, cmd: cmd, url: "http://" + addr, out: &tailBuffer{max: 2 << 20}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady waits until GET /readyz answers 200.
func (p *proc) waitReady(limit time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready: %s\n%s", p.name, p.cmd.ProcessState, p.out.String())
		}
		res, err := client.Get(p.url + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s (last: %v)", p.name, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// answer is one HTTP answer.
type answer struct {
	status int
	body   []byte
}

func (a answer) decode(v any) error { return json.Unmarshal(a.body, v) }

// problemType is the slug of a problem answer ("" for other bodies).
func (a answer) problemType() string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(a.body, &p)
	return p.Type[strings.LastIndexByte(p.Type, '/')+1:]
}

var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

// sendOnce sends one request to base.
func sendOnce(ctx context.Context, base, method, path, key, idemKey string, body any) (answer, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, reader)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, body: data}, err
}

// retryable reports whether an answer is not definite: rebill did
// nothing that stuck (5xx, the key's first request still running), so the
// same request with the same key may be sent again.
func retryable(a answer) bool {
	return a.status >= 500 || (a.status == http.StatusConflict && a.problemType() == "idempotency-key-in-use")
}

var requests atomic.Int64 // every HTTP request sent, retries included
