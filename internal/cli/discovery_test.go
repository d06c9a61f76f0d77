package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	discoverycmd "github.com/norsk-go/norsk-manager/internal/cli/discovery"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
)

func TestDiscoveryUsageErrors(t *testing.T) {
	t.Setenv(discoverycmd.EnvTierSecret, "")
	t.Setenv(discoverycmd.EnvLeafToken, "")
	f := &fixture{t: t} // no Manager: none of these may reach one
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"discovery", "publish", "--tier-secret", "s"}, "give the replicas with --address"},
		{[]string{"discovery", "publish", "--address", "r:1"}, "give the tier secret"},
		{[]string{"discovery", "publish", "--address", "r:1", "--tier-secret", "s", "--tier-secret-file", "f"}, "exclude each other"},
		{[]string{"discovery", "get", "x"}, "takes 0 argument(s)"},
		{[]string{"discovery", "rotate"}, "(STEP)"},
		{[]string{"discovery", "rotate", "rollback"}, `"rollback" is not a rotation step`},
		{[]string{"discovery", "rotate", "flip", "--new-tier-secret", "x"}, "only stage takes a new tier secret"},
		{[]string{"discovery", "verify-token", "nnt1.a.b"}, "--secret or --secret-file, or use --from-manager"},
		{[]string{"discovery", "verify-token"}, "(TOKEN)"},
	} {
		code, _, errOut := f.run("", tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("norsk-ctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.msg)
		}
	}
}

func TestDiscoveryCommands(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "tier")
	if err := os.WriteFile(secretFile, []byte("tier-secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(discoverycmd.EnvLeafToken, "leaf-token-1")

	if out := f.ok("discovery", "get"); !strings.Contains(out, "No discovery fleet has been published") {
		t.Fatalf("get before publish: %s", out)
	}
	if out := f.ok("-o", "json", "discovery", "get"); strings.TrimSpace(out) != "null" {
		t.Fatalf("get -o json before publish: %s", out)
	}
	f.fails(ExitError, "FAILED_PRECONDITION", "discovery", "rotate", "stage")

	out := f.ok("discovery", "publish", "--address", "r1:7400,r2:7400", "--address", "r3:7400", "--tier-secret-file", secretFile)
	if !strings.Contains(out, "r1:7400") || !strings.Contains(out, "r3:7400") || strings.Contains(out, "tier-secret-1") || strings.Contains(out, "leaf-token-1") {
		t.Fatalf("publish (secrets masked): %s", out)
	}
	// Different secrets are kept, and said so.
	code, out, errOut := f.run("", "-o", "json", "discovery", "publish", "--address", "r1:7400", "--tier-secret", "other", "--leaf-token", "other-leaf")
	var pub struct {
		Fleet struct {
			TierSecret string   `json:"tierSecret"`
			Addresses  []string `json:"addresses"`
		} `json:"fleet"`
		SecretsKept bool `json:"secretsKept"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &pub) != nil || !pub.SecretsKept || pub.Fleet.TierSecret != "tier-secret-1" || !strings.Contains(errOut, "stay in force") {
		t.Fatalf("second publish: %d %s %s", code, out, errOut)
	}

	out = f.ok("discovery", "get")
	if strings.Contains(out, "tier-secret-1") || !strings.Contains(out, "--show-secrets") || !strings.Contains(out, "Rotation:") {
		t.Fatalf("get masks the secrets: %s", out)
	}
	if out := f.ok("discovery", "get", "--show-secrets"); !strings.Contains(out, "tier-secret-1") || !strings.Contains(out, "leaf-token-1") {
		t.Fatalf("get --show-secrets: %s", out)
	}
	if out := f.ok("-o", "json", "discovery", "get"); !strings.Contains(out, `"tierSecret": "tier-secret-1"`) && !strings.Contains(out, `"tierSecret":"tier-secret-1"`) {
		t.Fatalf("get -o json: %s", out)
	}

	// verify-token with given secrets and with the Manager's.
	tok := discovery.MintNodeToken("tier-secret-1", "node-a")
	if out := f.ok("discovery", "verify-token", tok, "--secret", "nope", "--secret-file", secretFile); !strings.Contains(out, "node-a") {
		t.Fatalf("verify-token: %s", out)
	}
	if out := f.ok("-o", "json", "discovery", "verify-token", tok, "--from-manager"); !strings.Contains(out, `"nodeId"`) || !strings.Contains(out, "node-a") {
		t.Fatalf("verify-token --from-manager: %s", out)
	}
	if code, _, _ := f.run(tok+"\n", "discovery", "verify-token", "-", "--from-manager"); code != 0 {
		t.Fatalf("verify-token from stdin: exit %d", code)
	}
	f.fails(ExitError, `the node token of "node-a" is refused`, "discovery", "verify-token", tok, "--secret", "nope")
	f.fails(ExitError, "not a node token", "discovery", "verify-token", "garbage", "--secret", "nope")

	// Rotation: stage (generated), flip, finish; the old token is then refused.
	f.fails(ExitError, "FAILED_PRECONDITION", "discovery", "rotate", "flip")
	if out := f.ok("discovery", "rotate", "stage"); !strings.Contains(out, "staged") {
		t.Fatalf("stage: %s", out)
	}
	f.ok("discovery", "verify-token", tok, "--from-manager")
	f.ok("discovery", "rotate", "flip")
	f.ok("discovery", "verify-token", tok, "--from-manager")
	if out := f.ok("discovery", "rotate", "finish"); !strings.Contains(out, "Rotation:\tnone") && !strings.Contains(out, "none") {
		t.Fatalf("finish: %s", out)
	}
	f.fails(ExitError, "refused", "discovery", "verify-token", tok, "--from-manager")
}
