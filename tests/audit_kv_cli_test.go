package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/cli"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
)

// ctl runs norsk-ctl in-process against a Manager.
type ctl struct {
	t     *testing.T
	url   string
	token string
}

func (c ctl) run(stdin string, args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(ctx(c.t), append([]string{"--manager-url", c.url, "--token", c.token}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func (c ctl) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("norsk-ctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// The KV and audit commands of norsk-ctl against a real Manager: writes with
// and without preconditions, the audit entries they leave, a client-side
// verification of the chain, and a snapshot saved and inspected.
func TestAuditKvCLI(t *testing.T) {
	t.Parallel()
	c := testcluster.New(t, testcluster.Options{})
	n := ctl{t: t, url: c.URL(), token: c.Token()}
	dir := t.TempDir()

	revRE := regexp.MustCompile(`at revision (\d+)\n$`)
	out := n.ok("kv", "put", "app", "config/region", "eu-west-1", "--if-absent")
	m := revRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kv put: %q", out)
	}
	r1 := m[1]
	if out := n.ok("kv", "get", "app", "config/region"); out != "eu-west-1\n" {
		t.Errorf("kv get = %q", out)
	}
	var entry map[string]string
	if err := json.Unmarshal([]byte(n.ok("kv", "get", "app", "config/region", "-o", "json")), &entry); err != nil || entry["revision"] != r1 {
		t.Errorf("kv get -o json = %v (%v); want revision %s", entry, err, r1)
	}
	if code, _, errOut := n.run("", "kv", "get", "app", "missing"); code != cli.ExitError || !strings.Contains(errOut, "not found") {
		t.Errorf("kv get of an absent key: exit %d, %q", code, errOut)
	}

	// Preconditions: refused with FAILED_PRECONDITION, exit 1, nothing changed.
	for _, args := range [][]string{
		{"kv", "put", "app", "config/region", "x", "--if-absent"},
		{"kv", "put", "app", "config/region", "x", "--if-revision", fmt.Sprint(mustAtoi(t, r1) + 1000)},
		{"kv", "delete", "app", "nothing", "--if-revision", "5"},
	} {
		code, _, errOut := n.run("", args...)
		if code != cli.ExitError || !strings.Contains(strings.ToUpper(errOut), "FAILED_PRECONDITION") || !strings.Contains(errOut, "the write expects") {
			t.Errorf("norsk-ctl %s: exit %d, stderr %q; want exit 1 and FAILED_PRECONDITION", strings.Join(args, " "), code, errOut)
		}
	}

	// An all-or-nothing commit whose second write is stale changes nothing.
	stale := filepath.Join(dir, "stale.yaml")
	writeTestFile(t, stale, fmt.Sprintf("writes:\n- {key: config/ladder, put: '[1080, 720]'}\n- {key: config/region, put: eu-north-1, expectedRevision: %d}\n", mustAtoi(t, r1)+1000))
	code, _, errOut := n.run("", "kv", "commit", "app", "-f", stale)
	if code != cli.ExitError || !strings.Contains(strings.ToUpper(errOut), "FAILED_PRECONDITION") || !strings.Contains(errOut, `writes[1]: key "config/region" is at revision `+r1) {
		t.Errorf("stale kv commit: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := n.run("", "kv", "get", "app", "config/ladder"); code != cli.ExitError {
		t.Errorf("a refused commit wrote config/ladder")
	}
	good := filepath.Join(dir, "good.yaml")
	writeTestFile(t, good, fmt.Sprintf("setSchemaVersion: 1\nwrites:\n- {key: config/ladder, put: '[1080, 720]', expectedRevision: 0}\n- {key: config/region, put: eu-north-1, expectedRevision: %s}\n- {key: logo, putBase64: AAEC}\n", r1))
	out = n.ok("kv", "commit", "app", "-f", good)
	m = revRE.FindStringSubmatch(out)
	if m == nil || !strings.HasPrefix(out, "Committed 3 write(s) to app") {
		t.Fatalf("kv commit: %q", out)
	}
	r2 := m[1]
	out = n.ok("kv", "list", "app")
	for _, re := range []string{
		`(?m)^Namespace app: schema version 1, 3 keys$`,
		`(?m)^config/region\s+` + r2 + `\s+10\s+eu-north-1$`,
		`(?m)^logo\s+` + r2 + `\s+3\s+\(binary, 3 bytes\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("kv list lacks %s:\n%s", re, out)
		}
	}
	n.ok("kv", "delete", "app", "logo", "--if-revision", r2)

	// The audit log holds an entry for each write that applied: the method,
	// who called and what it acted on; the refused ones left none.
	var page struct {
		Entries []struct {
			Seq     string `json:"seq"`
			Source  string `json:"source"`
			Kind    string `json:"kind"`
			Payload string `json:"payload"`
		} `json:"entries"`
		ChainVerifiedAtBoot bool `json:"chainVerifiedAtBoot"`
	}
	if err := json.Unmarshal([]byte(n.ok("audit", "log", "--source", "api", "--kind", "KvCommit", "-o", "json")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 3 || !page.ChainVerifiedAtBoot {
		t.Fatalf("KvCommit audit entries: %+v", page)
	}
	for _, e := range page.Entries {
		var p struct{ Who, Method, Target string }
		if err := json.Unmarshal([]byte(e.Payload), &p); err != nil || p.Method != "KvCommit" || p.Target != "kv/app" ||
			!strings.HasPrefix(p.Who, "token:bootstrap/") || !strings.Contains(p.Who, " from 127.0.0.1:") {
			t.Errorf("audit entry %s payload %q (%v); want method KvCommit, target kv/app, who token:bootstrap/… from 127.0.0.1:…", e.Seq, e.Payload, err)
		}
	}
	out = n.ok("audit", "log")
	if !regexp.MustCompile(`(?m)^\d+\s+\S+Z\s+api\s+token:bootstrap/[0-9a-f]+\s+KvCommit\s+who="?token:bootstrap/[0-9a-f]+ from 127\.0\.0\.1:\d+"? method=KvCommit target=kv/app outcome=ok index=` + r2 + `$`).MatchString(out) {
		t.Errorf("audit log table lacks the commit at index %s (with its caller):\n%s", r2, out)
	}
	// A tool's own entry goes under external/ with its caller (issue 12,
	// item 3): "--source api" cannot pass for the Manager's record.
	n.ok("audit", "append", "--source", "test", "--kind", "note", "--payload", "checked the KV store")
	n.ok("audit", "append", "--source", "api", "--kind", "RevokeToken", "--payload", "forged")
	out = n.ok("audit", "log", "--limit", "2")
	for _, re := range []string{
		`(?m)^\d+\s+\S+Z\s+external/api\s+token:bootstrap/[0-9a-f]+\s+RevokeToken\s+forged$`,
		`(?m)^\d+\s+\S+Z\s+external/test\s+token:bootstrap/[0-9a-f]+\s+note\s+checked the KV store$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("audit log lacks %s:\n%s", re, out)
		}
	}

	// The whole chain verifies here, and did at boot.
	out = n.ok("audit", "verify")
	if !regexp.MustCompile(`verified \d+ entries from checkpoint seq 0`).MatchString(out) || !strings.Contains(out, "Manager's check at boot: verified") {
		t.Errorf("audit verify:\n%s", out)
	}

	// A snapshot saved from the Manager inspects clean and holds the keys.
	snap := filepath.Join(dir, "manager.snap")
	out = n.ok("operator", "snapshot", "save", snap)
	m = regexp.MustCompile(`^Saved a snapshot at index (\d+) \(schema version (\d+), \d+ records\) to .*: (\d+) bytes\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("snapshot save: %q", out)
	}
	fi, err := os.Stat(snap)
	if err != nil || fmt.Sprint(fi.Size()) != m[3] {
		t.Fatalf("saved file: %v, %v (save said %s bytes)", fi, err, m[3])
	}
	out = n.ok("operator", "snapshot", "inspect", snap)
	for _, re := range []string{
		`(?m)^Index:\s+` + m[1] + `$`,
		`(?m)^Schema version:\s+` + m[2] + `$`,
		`(?m)^KV keys\s+2$`,
		`(?m)^KV namespaces\s+1$`,
		`(?m)^nodes\s+0$`,
		`(?m)^Records:\s+\d+ \(checksum OK\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect lacks %s:\n%s", re, out)
		}
	}
	if !regexp.MustCompile(`(?m)^audit entries\s+([1-9]\d*)$`).MatchString(out) {
		t.Errorf("inspect shows no audit entries:\n%s", out)
	}
	// Damage it: one byte of the value, then cut it short.
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("eu-north-1"))
	if i < 0 {
		t.Fatal("the snapshot does not hold the value")
	}
	flipped := bytes.Clone(data)
	flipped[i] = 'E'
	writeTestFile(t, snap+".flipped", string(flipped))
	if code, _, errOut := n.run("", "operator", "snapshot", "inspect", snap+".flipped"); code != cli.ExitError || !strings.Contains(errOut, "DATA_LOSS") || !strings.Contains(errOut, "checksum") {
		t.Errorf("inspect of a flipped byte: exit %d, %q", code, errOut)
	}
	writeTestFile(t, snap+".short", string(data[:len(data)-3]))
	if code, _, errOut := n.run("", "operator", "snapshot", "inspect", snap+".short"); code != cli.ExitError || !strings.Contains(errOut, "INVALID_ARGUMENT") {
		t.Errorf("inspect of a truncated file: exit %d, %q", code, errOut)
	}

	// store info answers from the same member.
	if out := n.ok("store", "info"); !regexp.MustCompile(`(?m)^Store state:\s+schema version \d+`).MatchString(out) {
		t.Errorf("store info:\n%s", out)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
