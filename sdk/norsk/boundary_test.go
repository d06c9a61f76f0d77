package norsk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoInternalImports keeps the SDK free of the Manager's internals: it
// must build from the public API alone.
func TestNoInternalImports(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/norsk-go/norsk-manager/sdk/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/norsk-go/norsk-manager/internal") {
			t.Errorf("the SDK depends on %s", pkg)
		}
	}
}
