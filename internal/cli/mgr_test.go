package cli

import (
	"strings"
	"testing"
)

// norsk-ctl mgr user add|list|passwd|remove against the fake Manager's KV.
func TestMgrUserCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if code, _, errOut := f.run("admin-pass-1\n", "mgr", "user", "add", "alice", "--role", "admin"); code != 0 {
		t.Fatalf("add alice: %d %s", code, errOut)
	}
	if code, _, errOut := f.run("viewer-pass-1\n", "mgr", "user", "add", "vera"); code != 0 {
		t.Fatalf("add vera: %d %s", code, errOut)
	}
	out := f.ok("mgr", "user", "list")
	if !strings.Contains(out, "Role store version 2") || !strings.Contains(out, "alice\tadmin") && !strings.Contains(out, "alice") {
		t.Fatalf("list: %s", out)
	}
	if !strings.Contains(out, "vera") || !strings.Contains(out, "viewer") {
		t.Fatalf("list: %s", out)
	}
	if code, _, _ := f.run("short\n", "mgr", "user", "passwd", "vera"); code == 0 {
		t.Error("a short password was accepted")
	}
	if code, _, errOut := f.run("viewer-pass-2\n", "mgr", "user", "passwd", "vera"); code != 0 {
		t.Fatalf("passwd: %d %s", code, errOut)
	}
	if code, _, errOut := f.run("", "mgr", "user", "remove", "alice"); code == 0 || !strings.Contains(errOut, "last admin") {
		t.Errorf("removing the last admin: %d %q", code, errOut)
	}
	f.ok("mgr", "user", "remove", "vera")
	if out := f.ok("mgr", "user", "list", "-o", "json"); strings.Contains(out, "vera") || !strings.Contains(out, `"version": 4`) {
		t.Errorf("after remove: %s", out)
	}
}
