package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/cli/jobs"
	"github.com/norsk-go/norsk-manager/internal/cli/slots"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// now is the fixed clock of the tests.
var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is a fake Manager and a way to run norsk-ctl against it.
type fixture struct {
	t   *testing.T
	srv *norsktest.Server
}

func newFixture(t *testing.T) *fixture {
	srv := norsktest.NewServer(t)
	srv.SetClock(func() time.Time { return now.Add(-3 * time.Minute) })
	return &fixture{t: t, srv: srv}
}

// run runs norsk-ctl with args (the Manager's URL added) and returns its
// exit code, stdout and stderr.
func (f *fixture) run(stdin string, args ...string) (int, string, string) {
	f.t.Helper()
	var out, errOut bytes.Buffer
	g := globalsFor(strings.NewReader(stdin), &out, &errOut)
	g.Now = func() time.Time { return now }
	url := "http://127.0.0.1:1"
	if f.srv != nil {
		url = f.srv.URL
	}
	code := run(f.t.Context(), g, append([]string{"--manager-url", url}, args...))
	return code, out.String(), errOut.String()
}

// ok runs norsk-ctl, expects success and returns stdout.
func (f *fixture) ok(args ...string) string {
	f.t.Helper()
	code, out, errOut := f.run("", args...)
	if code != 0 {
		f.t.Fatalf("norsk-ctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// fails runs norsk-ctl and expects exit code want, with an error containing
// msg.
func (f *fixture) fails(want int, msg string, args ...string) {
	f.t.Helper()
	code, out, errOut := f.run("", args...)
	if code != want || !regexp.MustCompile(`(?m)^Error: .*`+regexp.QuoteMeta(msg)).MatchString(errOut) {
		f.t.Fatalf("norsk-ctl %s: exit %d, stderr %q (stdout %q); want exit %d and an error containing %q", strings.Join(args, " "), code, errOut, out, want, msg)
	}
}

func writeFile(t *testing.T, name, content string) string {
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const newsSpec = `jobId: news-1
description: News channel
tags: {channel: news}
services:
  - name: web
    image: nginx
    restart: {mode: on-failure, count: 3, periodS: 60}
    ports: [{containerPort: 8080, protocol: tcp}, {containerPort: 5000, protocol: udp, specific: 5000}]
`

func TestTranslateLegacyMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"--mode=worker --token=t --manager-url=u", "worker --token=t --manager-url=u"},
		{"--token=t --mode worker --manager-url=u", "worker --token=t --manager-url=u"},
		{"--token t --manager-url u --mode=worker", "worker --token t --manager-url u"},
		{"job list", "job list"},
		{"--mode=other", "--mode=other"},
		{"job create -f x -- --mode=worker", "job create -f x -- --mode=worker"},
		{"", ""},
	} {
		if got := strings.Join(TranslateLegacyMode(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("TranslateLegacyMode(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t} // no Manager: none of these may reach one
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"jbo"}, `did you mean "job"?`},
		{[]string{"job", "bogus"}, `unknown command "bogus" for "norsk-ctl job"`},
		{[]string{"job", "get"}, "takes 1 argument(s) (ID), got 0"},
		{[]string{"job", "get", "a", "b"}, "got 2"},
		{[]string{"job", "list", "--nope"}, "unknown flag: --nope"},
		{[]string{"job", "list", "--tag", "novalue"}, `--tag "novalue": want KEY=VALUE`},
		{[]string{"job", "list", "--created-after", "someday"}, `--created-after: "someday" is neither`},
		{[]string{"job", "list", "--limit", "-1"}, "invalid argument"},
		{[]string{"job", "start", "j"}, "--node is required"},
		{[]string{"job", "stop", "j", "--node", "n", "--grace", "-1s"}, "--grace must not be negative"},
		{[]string{"job", "fail", "j"}, "--reason is required"},
		{[]string{"job", "create"}, "-f FILE"},
		{[]string{"job", "update", "-f", "x", "--hash", "1", "--latest"}, "exclude each other"},
		{[]string{"node", "tag", "n1"}, "at least 2 argument(s)"},
		{[]string{"node", "tag", "n1", "=v"}, "want KEY=VALUE"},
		{[]string{"node", "idle-expiry", "n1", "--set", "soon"}, "--set"},
		{[]string{"slot", "set-pool", "n1"}, "takes 2 argument(s)"},
		{[]string{"events", "--after", "3", "--no-snapshot"}, "--no-snapshot applies only"},
		{[]string{"-o", "xml", "node", "list"}, `invalid output format "xml"`},
		{[]string{"--timeout", "0s", "node", "list"}, "--timeout must be positive"},
		{[]string{"node", "create-aws", "--region", "eu-west-1"}, "give --region and --type"},
		{[]string{"node", "create-aws", "--type", "c6i.large"}, "give --region and --type"},
		{[]string{"node", "create-aws", "a", "b", "--region", "r", "--type", "t"}, "got 2"},
		{[]string{"node", "create-aws", "--region", "r", "--type", "t", "--tag", "novalue"}, "want KEY=VALUE"},
		{[]string{"node", "create-oci", "--shape", "VM.Standard2.1"}, "give --availability-domain and --shape"},
		{[]string{"security-groups"}, "give --region"},
		{[]string{"reload-config", "x"}, "got 1"},
		{[]string{"instance-types", "a", "b"}, "got 2"},
	} {
		code, _, errOut := f.run("", tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.msg) || !strings.Contains(errOut, "--help' for usage") {
			t.Errorf("norsk-ctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.msg)
		}
	}
	// Help is not an error.
	if code, out, _ := f.run("", "job"); code != 0 || !strings.Contains(out, "start-prepared") {
		t.Errorf("norsk-ctl job: exit %d, %q", code, out)
	}
	if code, out, _ := f.run("", "cluster-node", "--help"); code != 0 || !strings.Contains(out, "set-pool") {
		t.Errorf("norsk-ctl cluster-node --help: exit %d, %q", code, out)
	}
	if code, out, _ := f.run("", "completion", "bash"); code != 0 || !strings.Contains(out, "bash completion") {
		t.Errorf("norsk-ctl completion bash: exit %d", code)
	}
}

func TestUnreachableManager(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t}
	f.fails(ExitError, "UNAVAILABLE", "node", "list", "--timeout", "5s")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	out := f.ok("version")
	if strings.Count(out, "\n") != 1 {
		t.Errorf("version printed %d lines, want one:\n%s", strings.Count(out, "\n"), out)
	}
	for _, want := range []string{"norsk-ctl ", "protocol 1.10", "Manager norsktest", f.srv.URL, ": same protocol 1.10\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	var v struct {
		Client  map[string]string `json:"client"`
		Manager struct {
			Hello map[string]any `json:"hello"`
		} `json:"manager"`
	}
	if err := json.Unmarshal([]byte(f.ok("version", "-o", "json")), &v); err != nil || v.Client["protocolVersion"] != "1.10" || v.Manager.Hello["protocolVersion"] != "1.10" {
		t.Errorf("version -o json = %+v, %v", v, err)
	}
	f.srv.SetHello(&managerv1.DaemonHello{ProtocolVersion: "1.7", BuildLabel: "older", Compatible: true})
	if out := f.ok("version"); !strings.Contains(out, "Manager older at") || !strings.Contains(out, "Manager protocol 1.7 is 3 minor versions older than this SDK's 1.10") {
		t.Errorf("version against a 1.7 Manager: %s", out)
	}
	f.srv.SetHello(&managerv1.DaemonHello{ProtocolVersion: "2.0", BuildLabel: "future"})
	f.fails(ExitError, "daemon speaks wire protocol 2.0", "version")
}

func TestJobCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1", NodeName: "worker-1", Address: "10.0.0.1:7000"})
	spec := writeFile(t, "news.yaml", newsSpec)

	out := f.ok("job", "create", "-f", spec)
	if !regexp.MustCompile(`(?m)^news-1\s+\d+$`).MatchString(out) {
		t.Errorf("job create printed %q", out)
	}
	f.fails(ExitError, "ALREADY_EXISTS", "job", "create", "-f", spec)
	f.fails(ExitError, `unknown value "sometimes"`, "job", "create", "-f", writeFile(t, "bad.yaml", "jobId: x\nservices: [{name: a, restart: {mode: sometimes}}]"))

	// From stdin, two documents, JSON output.
	code, out, errOut := f.run("jobId: a\ntags: {env: dev}\nservices: [{name: main, image: hello}]\n---\njobId: b\nservices: [{name: main, image: hello}]\n", "job", "create", "-f", "-", "-o", "json")
	if code != 0 {
		t.Fatalf("create from stdin: %d %s", code, errOut)
	}
	var createdJobs []jobs.Created
	if err := json.Unmarshal([]byte(out), &createdJobs); err != nil || len(createdJobs) != 2 || createdJobs[1].JobID != "b" {
		t.Errorf("create -o json = %q (%v)", out, err)
	}

	// Update: the spec has no hash; --hash stale; --latest.
	f.fails(ExitUsage, "no currentHash", "job", "update", "-f", spec)
	f.fails(ExitError, "stale hash", "job", "update", "-f", spec, "--hash", "999")
	code, out, errOut = f.run("", "job", "update", "-f", spec, "--latest")
	if code != 0 || !strings.Contains(errOut, "Using the current hash") || !strings.Contains(out, "Job news-1 updated: hash") {
		t.Errorf("update --latest: %d %q %q", code, out, errOut)
	}

	// List and filters.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"a", "b", "news-1"}},
		{[]string{"--tag", "channel=news"}, []string{"news-1"}},
		{[]string{"--tag-neq", "channel=news"}, []string{"a", "b"}},
		{[]string{"--tag-re", "env=d.*"}, []string{"a"}},
		{[]string{"--tag-exists", "env"}, []string{"a"}},
		{[]string{"--tag-absent", "env", "--tag-absent", "channel"}, []string{"b"}},
		{[]string{"--id", "b"}, []string{"b"}},
		{[]string{"--id-neq", "b"}, []string{"a", "news-1"}},
		{[]string{"--id-re", "[ab]"}, []string{"a", "b"}},
		{[]string{"--created-after", "1h"}, []string{"a", "b", "news-1"}},
		{[]string{"--created-before", "1h"}, nil},
		{[]string{"--updated-after", "2025-03-01"}, []string{"a", "b", "news-1"}},
		{[]string{"--created-before", "2025-03-01T12:00:00Z"}, []string{"a", "b", "news-1"}},
		{[]string{"--limit", "2"}, []string{"a", "b"}},
		{[]string{"--after-id", "a"}, []string{"b", "news-1"}},
	} {
		out := f.ok(append([]string{"job", "list", "-o", "json"}, tc.args...)...)
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatalf("job list %v: %v\n%s", tc.args, err, out)
		}
		var ids []string
		for _, r := range raw {
			var j struct {
				Job struct {
					JobID string `json:"jobId"`
				} `json:"job"`
			}
			_ = json.Unmarshal(r, &j)
			ids = append(ids, j.Job.JobID)
		}
		if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
			t.Errorf("job list %v = %v, want %v", tc.args, ids, tc.want)
		}
	}
	table := f.ok("job", "list")
	if !regexp.MustCompile(`(?m)^ID\s+STATE\s+INSTANCES`).MatchString(table) || !regexp.MustCompile(`(?m)^news-1\s+pre\s+-\s+1\s+channel=news\s+News channel$`).MatchString(table) {
		t.Errorf("job list table:\n%s", table)
	}

	// Start and wait: the ports are printed.
	code, out, errOut = f.run("", "job", "start", "news-1", "--node", "node-1")
	if code != 0 {
		t.Fatalf("job start: %d %s", code, errOut)
	}
	for _, want := range []string{"Job news-1: primary running on node-1", "web", "8080→32768/tcp", "10.0.0.1:32768", "5000→5000/udp"} {
		if !strings.Contains(out, want) {
			t.Errorf("job start output lacks %q:\n%s", want, out)
		}
	}
	f.fails(ExitError, "FAILED_PRECONDITION", "job", "start", "news-1", "--node", "node-1")

	// get and history.
	out = f.ok("job", "get", "news-1")
	for _, want := range []string{"Job:", "news-1", "State:", "active", "on-failure (3 in 60s)", "8080→*/tcp", "5000→5000/udp", "primary", "node-1", "running", "3m ago", "RECENT HISTORY"} {
		if !strings.Contains(out, want) {
			t.Errorf("job get lacks %q:\n%s", want, out)
		}
	}
	out = f.ok("job", "history", "news-1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[1], "running") || !strings.Contains(lines[1], "web 8080→32768/tcp") || !strings.Contains(lines[4], "created") {
		t.Errorf("job history (newest first):\n%s", out)
	}
	y := f.ok("job", "history", "news-1", "-o", "yaml")
	var hist []map[string]any
	if err := yaml.Unmarshal([]byte(y), &hist); err != nil || len(hist) != 4 || hist[0]["running"] == nil {
		t.Errorf("job history -o yaml = %v (%v)\n%s", hist, err, y)
	}

	// Stop and wait.
	code, out, errOut = f.run("", "job", "stop", "news-1", "--node", "node-1", "--grace", "5s", "--wait")
	if code != 0 || !strings.Contains(out, "primary stopped on node-1") {
		t.Errorf("job stop --wait: %d %q %q", code, out, errOut)
	}
	if g := f.srv.Job("news-1").GetInstances()[0].GetStopGraceMs(); g != 5000 {
		t.Errorf("grace = %d", g)
	}

	// A start that fails: non-zero exit with the reason.
	f.srv.SetStartOutcome(norsktest.StartOutcome{Fail: "encoder crashed"})
	f.fails(ExitError, "stopped before it could run: job-failed: encoder crashed (exit web=1", "job", "start", "news-1", "--node", "node-1")
	// A start that never gets anywhere times out.
	f.srv.SetStartOutcome(norsktest.StartOutcome{Hold: true})
	f.fails(ExitError, "timed out after 200ms waiting for job news-1 (backup on node-1) to run (last seen: provisioned)", "job", "start", "news-1", "--node", "node-1", "--role", "backup", "--wait-timeout", "200ms")
	f.ok("job", "stop", "news-1", "--node", "node-1", "--role", "backup")
	f.srv.SetStartOutcome(norsktest.StartOutcome{})

	// Deferred start, then start-prepared.
	out = f.ok("job", "start", "a", "--node", "node-1", "--role", "backup", "--defer-start", "--runtime-role", "standby", "-o", "json")
	var in map[string]any
	if err := json.Unmarshal([]byte(out), &in); err != nil || in["phase"] != "INSTANCE_PHASE_PREPARED" || in["runtimeRole"] != "standby" {
		t.Errorf("start --defer-start -o json = %s", out)
	}
	out = f.ok("job", "start-prepared", "a", "--node", "node-1", "--role", "backup")
	if !strings.Contains(out, "backup running on node-1") {
		t.Errorf("start-prepared: %s", out)
	}
	// Without --wait.
	out = f.ok("job", "start", "b", "--node", "node-1", "--wait=false")
	if !strings.Contains(out, "primary started on node-1 (fencing token") {
		t.Errorf("start --wait=false: %s", out)
	}

	// Complete, fail, delete.
	f.ok("job", "complete", "a")
	f.fails(ExitError, "has completed; it cannot be marked failed", "job", "fail", "a", "--reason", "x")
	out = f.ok("job", "fail", "b", "--reason", "restart ceiling")
	if !strings.Contains(out, "Job b marked failed") {
		t.Errorf("job fail: %s", out)
	}
	if ts := f.srv.Job("b").GetJob().GetTerminalState(); ts.GetReason() != "restart ceiling" {
		t.Errorf("terminal state = %v", ts)
	}
	f.ok("job", "delete", "b")
	f.fails(ExitError, "NOT_FOUND", "job", "get", "b")
	out = f.ok("job", "delete", "a", "-o", "json")
	if !strings.Contains(out, `"result": "deleted"`) {
		t.Errorf("delete -o json: %s", out)
	}
}

func TestNodeCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1", NodeName: "worker-1", Address: "10.0.0.1:7000",
		Hardware: &managerv1.Hardware{Vcpus: 16, MemoryBytes: 64 << 30, Architecture: managerv1.Architecture_ARCHITECTURE_X86_64},
		Tags:     map[string]string{"pool": "gold"}})

	out := f.ok("node", "list")
	if !regexp.MustCompile(`(?m)^node-1\s+worker-1\s+cluster\s+online\s+3m ago\s+10.0.0.1:7000\s+16\s+64.0 GiB\s+-\s+0\s+-\s+pool=gold$`).MatchString(out) {
		t.Errorf("node list:\n%s", out)
	}
	out = f.ok("node", "get", "node-1")
	for _, want := range []string{"Node:", "worker-1", "16 vCPUs, 64.0 GiB memory, x86-64", "online since 3m ago"} {
		if !strings.Contains(out, want) {
			t.Errorf("node get lacks %q:\n%s", want, out)
		}
	}
	f.fails(ExitError, "node nope: not found", "node", "get", "nope")

	out = f.ok("node", "tag", "node-1", "az=a", "rack=")
	if !strings.Contains(out, "az=a,pool=gold,rack=") {
		t.Errorf("node tag: %s", out)
	}
	out = f.ok("node", "idle-expiry", "node-1")
	if !strings.Contains(out, "none") || !strings.Contains(out, "10m0s (the daemon-wide value)") {
		t.Errorf("idle-expiry: %s", out)
	}
	out = f.ok("node", "idle-expiry", "node-1", "--set", "1d")
	if !strings.Contains(out, "Override:  24h0m0s") {
		t.Errorf("idle-expiry --set 1d: %s", out)
	}
	out = f.ok("node", "idle-expiry", "node-1", "--set", "0", "-o", "json")
	if !strings.Contains(out, `"effectiveIdleExpiryMs": "600000"`) || strings.Contains(out, `"idleExpiryMs"`) {
		t.Errorf("idle-expiry --set 0 -o json: %s", out)
	}
	f.ok("node", "terminate", "node-1")
	f.ok("node", "terminate", "node-1") // idempotent, as the Manager's
}

func TestSlotCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	out := f.ok("slot", "register", "rack-1", "--pool", "gold")
	m := regexp.MustCompile(`norsk-ctl worker --token (\S+) --manager-url (\S+)`).FindStringSubmatch(out)
	if m == nil || m[2] != f.srv.URL || !strings.Contains(out, "as node rack-1 in pool gold") || !strings.Contains(out, "is this machine") {
		t.Fatalf("slot register:\n%s", out)
	}
	token := m[1]
	out = f.ok("slot", "register", "rack-2", "-o", "json")
	var reg slots.Registration
	if err := json.Unmarshal([]byte(out), &reg); err != nil || reg.NodeID != "rack-2" || !strings.HasPrefix(reg.WorkerCommand, "norsk-ctl worker --token "+reg.Token) {
		t.Errorf("slot register -o json: %s", out)
	}
	out = f.ok("cluster-node", "list")
	if !strings.Contains(out, token) || !regexp.MustCompile(`(?m)^rack-1\s+rack-1\s+gold\s+registered\s+false`).MatchString(out) {
		t.Errorf("slot list:\n%s", out)
	}
	f.ok("slot", "set-pool", "rack-1", "silver")
	out = f.ok("slot", "set-pool", "rack-1", "")
	if !strings.Contains(out, "removed from its pool") {
		t.Errorf("set-pool '': %s", out)
	}
	f.ok("slot", "deregister", "rack-2")
	f.fails(ExitError, "NOT_FOUND", "slot", "deregister", "rack-2")
	out = f.ok("slot", "list", "-o", "yaml")
	if !strings.Contains(out, "nodeName: rack-1") || strings.Contains(out, "rack-2") {
		t.Errorf("slot list -o yaml:\n%s", out)
	}
}

// lockedBuffer is an output buffer that a command goroutine writes while the
// test reads it; waitFor blocks until it holds a string.
type lockedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{changed: make(chan struct{})} }

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		found, ch := strings.Contains(b.buf.String(), s), b.changed
		b.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("output never contained %q:\n%s", s, b.String())
		}
	}
}

// runEvents runs norsk-ctl events with args until the returned stop is
// called; stop returns the exit code.
func (f *fixture) runEvents(out io.Writer, args ...string) (stop func() int) {
	ctx, cancel := context.WithCancel(f.t.Context())
	done := make(chan int, 1)
	go func() {
		g := globalsFor(strings.NewReader(""), out, io.Discard)
		done <- run(ctx, g, append([]string{"--manager-url", f.srv.URL, "events"}, args...))
	}()
	return func() int {
		cancel()
		return <-done
	}
}

func TestEventsCommand(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1"})
	f.ok("job", "create", "-f", writeFile(t, "j.yaml", "jobId: j1\nservices: [{name: main, image: hello}]"))

	out := newLockedBuffer()
	stop := f.runEvents(out, "-o", "json")
	out.waitFor(t, "initialDataComplete")
	f.ok("job", "delete", "j1")
	out.waitFor(t, "jobDeleted")
	if code := stop(); code != 0 {
		t.Fatalf("events exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("events -o json printed %d lines:\n%s", len(lines), out.String())
	}
	for i, want := range []string{"jobSnapshot", "nodeSnapshot", "initialDataComplete", "jobDeleted"} {
		var ev map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &ev); err != nil || ev[want] == nil {
			t.Errorf("line %d = %s; want a %s event", i, lines[i], want)
		}
	}

	// The table form, resuming after an index: one line per event.
	out = newLockedBuffer()
	stop = f.runEvents(out, "--after", "1")
	out.waitFor(t, "job_deleted")
	if code := stop(); code != 0 {
		t.Fatalf("events exit %d", code)
	}
	if !regexp.MustCompile(`(?m)^2\s+\S+Z\s+job_created\s+job j1 created$`).MatchString(out.String()) ||
		!regexp.MustCompile(`(?m)^3\s+\S+Z\s+job_deleted\s+job j1$`).MatchString(out.String()) {
		t.Errorf("events table:\n%s", out.String())
	}
	if !strings.HasPrefix(out.String(), "INDEX ") {
		t.Errorf("events table without its header:\n%s", out.String())
	}

	f.fails(ExitUsage, `--kind "jobsCreated" is no event kind`, "events", "--kind", "jobsCreated")

	// Filters (the Manager applies them): by kind (either spelling), by
	// job, by node.
	f.ok("job", "create", "-f", writeFile(t, "j2.yaml", "jobId: j2\nservices: [{name: main, image: hello}]"))
	f.ok("job", "create", "-f", writeFile(t, "j3.yaml", "jobId: j3\nservices: [{name: main, image: hello}]"))
	f.ok("job", "delete", "j3")
	for _, tc := range []struct {
		args      []string
		wait      string
		want, not []string
	}{
		{[]string{"--after", "1", "--kind", "jobDeleted"}, "job j3", []string{"job j1"}, []string{"job_created"}},
		{[]string{"--after", "1", "--job", "j3"}, "job_deleted", []string{"job j3 created"}, []string{"job j1", "job j2"}},
		{[]string{"--node", "node-1"}, "node_snapshot", nil, []string{"job_snapshot"}},
	} {
		out = newLockedBuffer()
		stop = f.runEvents(out, tc.args...)
		out.waitFor(t, tc.wait)
		if code := stop(); code != 0 {
			t.Fatalf("events %v exit %d", tc.args, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("events %v lacks %q:\n%s", tc.args, w, out.String())
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out.String(), n) {
				t.Errorf("events %v has %q:\n%s", tc.args, n, out.String())
			}
		}
	}
}
