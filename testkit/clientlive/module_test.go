package clientlive_test

import (
	"os/exec"
	"testing"
)

// The client's own tests run in its module (client/go.mod), which `go test
// ./...` at the root does not enter even in workspace mode: this runs them,
// with the client module alone (GOWORK=off), so that they also prove the
// client builds and passes without anything of the service.
func TestClientModule(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = "../../client"
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in client/: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
