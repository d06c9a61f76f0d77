package cli

import (
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// TestNodePrefetch follows a prefetch of three refs where one fails: a line
// per ref, the failure with its reason, a non-zero exit naming it, and the
// node's held images shown by node get and node list afterwards.
func TestNodePrefetch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "edge-1", Runtime: "docker", Tags: map[string]string{"pool": "gold"},
		HeldImages: []*managerv1.HeldImage{{Ref: "docker.io/library/base:1", Digest: "sha256:0123456789abcdef0123", SizeBytes: 5 << 20}}})
	f.srv.SetPrefetchFailure("127.0.0.1:5000/norsk/missing:v1", "manifest unknown")

	code, out, errOut := f.run("", "node", "prefetch", "edge-1", "127.0.0.1:5000/norsk/encoder:v3", "docker.io/library/base:1", "127.0.0.1:5000/norsk/missing:v1")
	if code != ExitError {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitError, out, errOut)
	}
	for _, want := range []string{
		"[1/3] 127.0.0.1:5000/norsk/encoder:v3: pulled (sha256:",
		"[2/3] docker.io/library/base:1: already present (sha256:0123456789ab, 5.0 MiB)",
		"[3/3] 127.0.0.1:5000/norsk/missing:v1: failed: pull image \"127.0.0.1:5000/norsk/missing:v1\": manifest unknown",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("prefetch output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "1 of 3 image(s) not pulled: 127.0.0.1:5000/norsk/missing:v1") {
		t.Errorf("prefetch stderr: %s", errOut)
	}
	out = f.ok("node", "get", "edge-1")
	for _, want := range []string{"IMAGE", "base:1", "127.0.0.1:5000/norsk/encoder:v3"} {
		if !strings.Contains(out, want) {
			t.Errorf("node get lacks %q:\n%s", want, out)
		}
	}
	if out := f.ok("node", "list"); !strings.Contains(out, "127.0.0.1:5000/norsk/encoder:v3,base:1") {
		t.Errorf("node list:\n%s", out)
	}
	out = f.ok("node", "prefetch", "edge-1", "base:2", "--no-wait")
	if !strings.Contains(out, "follow with: norsk-ctl events --after") {
		t.Errorf("--no-wait: %s", out)
	}
	f.fails(ExitError, "NOT_FOUND", "node", "prefetch", "nope", "x:1")
	f.fails(ExitUsage, "needs at least 2 argument(s)", "node", "prefetch", "edge-1")
}
