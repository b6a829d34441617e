package clientlive_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The checked-in rebill.gen.go is what go generate makes from the served
// document with the checked-in configuration: a change to api/openapi.json
// that was not regenerated fails here.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "rebill.gen.go")
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", "../../client/oapi-codegen.yaml", "-o", out, "../../api/openapi.json")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../client/rebill.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("client/rebill.gen.go is stale: run `go generate ./client` and commit the result")
	}
}
