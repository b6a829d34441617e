package clientlive_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A module of someone else's takes the client as docs/client.md says (a
// replace until the module path is published), and gets the client alone:
// it builds, and nothing of the service (its database driver, its job
// queue) enters its go.sum.
func TestConsumerModuleGetsTheClientAlone(t *testing.T) {
	t.Parallel()
	clientDir, err := filepath.Abs("../../client")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/consumer\n\ngo 1.26.8\n",
		"main.go": `package main

import (
	"context"
	"fmt"

	"github.com/rebill/rebill/client"
)

func main() {
	c, err := client.New("http://127.0.0.1:1", "key")
	if err != nil {
		panic(err)
	}
	_, err = c.Subscription(context.Background(), [16]byte{})
	fmt.Println(err != nil)
}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	goCmd("mod", "edit", "-require=github.com/rebill/rebill/client@v0.0.0", "-replace=github.com/rebill/rebill/client="+clientDir)
	goCmd("mod", "tidy")
	goCmd("build", "-o", filepath.Join(dir, "consumer"), ".")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, service := range []string{"github.com/jackc/pgx", "github.com/riverqueue/river", "github.com/rebill/rebill "} {
		if strings.Contains(string(sum), service) {
			t.Errorf("the consumer's go.sum holds %s, a dependency of the service:\n%s", service, sum)
		}
	}
}
