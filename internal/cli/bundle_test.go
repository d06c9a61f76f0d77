package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/examples/jobs"
	"github.com/norsk-go/norsk-manager/internal/cli/bundles"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

const newsBundle = `bundleId: news
resiliencePolicy: {sameNode: forbid}
jobs:
  - jobName: channel
    requirements: {requiredCapacity: 0.5}
    job:
      services: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
  - jobName: recorder
    startMode: manual
    job:
      services: [{name: rec, image: rec}]
`

// matches fails the test unless out matches every pattern.
func matches(t *testing.T, what, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("%s does not match %q:\n%s", what, p, out)
		}
	}
}

func TestBundleCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1", Hardware: &managerv1.Hardware{Vcpus: 16}})
	f.srv.AddNode(&managerv1.Node{NodeId: "node-2", Hardware: &managerv1.Hardware{Vcpus: 16}})
	spec := writeFile(t, "news.yaml", newsBundle)

	out := f.ok("bundle", "create", "-f", spec)
	if out != "Bundle news created (norsk-ctl bundle show news).\n" {
		t.Errorf("bundle create printed %q", out)
	}
	f.fails(ExitError, "create bundle news: CreateBundle: ALREADY_EXISTS", "bundle", "create", "-f", spec)
	f.fails(ExitError, "bundle.jobs[1].jobName", "bundle", "create", "-f", writeFile(t, "dup.yaml", "bundleId: dup\njobs: [{jobName: a, job: {}}, {jobName: a, job: {}}]"))
	f.fails(ExitError, "bundle.jobs[0].coLocateWith[0]", "bundle", "create", "-f", writeFile(t, "co.yaml", "bundleId: co\njobs: [{jobName: a, coLocateWith: [b], job: {}}]"))
	f.fails(ExitError, `bundle.resiliencePolicy.sameNode: unknown value "never"`, "bundle", "create", "-f", writeFile(t, "aa.yaml", "bundleId: aa\nresiliencePolicy: {sameNode: never}"))
	f.fails(ExitError, "read the bundle spec", "bundle", "create", "-f", filepath.Join(t.TempDir(), "missing.yaml"))

	// From stdin, JSON, with no id: the Manager makes one up.
	code, out, errOut := f.run(`{"jobs": [{"jobName": "solo", "job": {"services": [{"name": "main", "image": "hello"}]}}]}`, "bundle", "create", "-f", "-", "-o", "json")
	var c bundles.BundleCreated
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || !strings.HasPrefix(c.BundleID, "b-") {
		t.Fatalf("bundle create from stdin -o json: %d %q %q", code, out, errOut)
	}

	out = f.ok("bundle", "list")
	matches(t, "bundle list", out, `(?m)^BUNDLE\s+STATE\s+POOL\s+REPLICAS\s+JOBS\s+PLACED$`, `(?m)^news\s+live\s+-\s+2\s+2\s+0/4$`, `(?m)^b-\S+\s+live\s+-\s+1\s+1\s+0/1$`)

	// Place two replica jobs, one of them degraded (as the AutoManager
	// records it).
	f.ok("job", "start", "news.channel.0", "--node", "node-1")
	m, err := norsk.Connect(t.Context(), norsk.Settings{URL: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.StartJob(t.Context(), "news.channel.1", "backup", "node-1", norsk.StartJobOptions{Placement: &norsk.PlacementEvent{
		Degradations: []*norsk.PlacementRefusal{{Rule: "antiAffinity.sameNode", Reason: "no other node can take it"}},
	}}); err != nil {
		t.Fatal(err)
	}
	out = f.ok("bundle", "show", "news")
	matches(t, "bundle show", out,
		`(?m)^Bundle:\s+news$`, `(?m)^State:\s+live$`, `(?m)^Replicas:\s+2\s+\(same node: forbid, same az: allow, same cloud: allow\)$`,
		`(?m)^Stop at:\s+-$`, `(?m)^Created:\s+3m ago$`,
		`(?m)^JOB ID\s+NAME\s+REPLICA\s+ROLE\s+NODE\s+PHASE\s+DORMANT\s+DEGRADATIONS$`,
		`(?m)^news\.channel\.0\s+channel\s+0\s+primary\s+node-1\s+running\s+no\s+-$`,
		`(?m)^news\.recorder\.0\s+recorder\s+0\s+primary\s+-\s+-\s+yes\s+-$`,
		`(?m)^news\.channel\.1\s+channel\s+1\s+backup\s+node-1\s+running\s+no\s+antiAffinity\.sameNode: no other node can take it$`)
	matches(t, "bundle list", f.ok("bundle", "list"), `(?m)^news\s+live\s+-\s+2\s+2\s+2/4$`)
	var bw map[string]any
	if err := json.Unmarshal([]byte(f.ok("bundle", "show", "news", "-o", "json")), &bw); err != nil || len(bw["jobs"].([]any)) != 4 || bw["bundle"].(map[string]any)["bundleId"] != "news" {
		t.Errorf("bundle show -o json = %v (%v)", bw, err)
	}
	f.fails(ExitError, "get bundle nope: BundleById: NOT_FOUND", "bundle", "show", "nope")

	// Start and stop bundle jobs.
	out = f.ok("bundle", "start-job", "news", "1", "recorder")
	if !strings.Contains(out, "Bundle news job recorder of replica 1 started") {
		t.Errorf("bundle start-job: %s", out)
	}
	if tags := f.srv.Job("news.recorder.1").GetJob().GetTags(); tags["dormant"] != "" {
		t.Errorf("started job still dormant: %v", tags)
	}
	out = f.ok("bundle", "stop-job", "news", "0", "channel", "--grace", "5s", "-o", "json")
	if !strings.Contains(out, `"result": "job channel of replica 0 stopping, and kept down (dormant)"`) {
		t.Errorf("bundle stop-job -o json: %s", out)
	}
	j := f.srv.Job("news.channel.0")
	if j.GetJob().GetTags()["dormant"] != "true" || j.GetInstances()[0].GetStopGraceMs() != 5000 || j.GetInstances()[0].GetPhase() != norsk.InstancePhaseStopped {
		t.Errorf("stopped bundle job = %v", j)
	}
	f.fails(ExitError, "INVALID_ARGUMENT: replicaIndex", "bundle", "start-job", "news", "2", "channel")
	f.fails(ExitError, "INVALID_ARGUMENT: jobName", "bundle", "stop-job", "news", "0", "nope")

	// Stop time and lease.
	out = f.ok("bundle", "stop-time", "news", "--in", "1h")
	if !strings.Contains(out, "Bundle news is deleted at 2025-03-01T13:00:00Z (in 1h).") {
		t.Errorf("stop-time --in: %s", out)
	}
	if at := f.srv.Bundle("news").GetStopAt().AsTime(); !at.Equal(now.Add(60 * 60e9)) {
		t.Errorf("stop time = %v", at)
	}
	out = f.ok("bundle", "stop-time", "news", "--at", "2025-06-01T18:00:00Z", "-o", "json")
	if !strings.Contains(out, `"stopAt": "2025-06-01T18:00:00Z"`) {
		t.Errorf("stop-time --at -o json: %s", out)
	}
	matches(t, "bundle show", f.ok("bundle", "show", "news"), `(?m)^Stop at:\s+2025-06-01T18:00:00Z \(in 92d\)$`)
	if out := f.ok("bundle", "stop-time", "news", "--clear"); out != "Bundle news: stop time cleared.\n" || f.srv.Bundle("news").GetStopAt() != nil {
		t.Errorf("stop-time --clear: %q", out)
	}
	out = f.ok("bundle", "renew-lease", "news", "--ttl", "1d")
	if !strings.Contains(out, "Bundle news: lease renewed; it runs out at 2025-03-02T11:57:00Z (in 23h) unless renewed again.") {
		t.Errorf("renew-lease: %s", out)
	}
	f.fails(ExitError, "renew the lease of bundle news: RenewBundleLease: INVALID_ARGUMENT: ttlMs", "bundle", "renew-lease", "news", "--ttl", "10ms")

	// Update: a stale revision is refused; then a job is added.
	upd := writeFile(t, "upd.yaml", newsBundle+"  - jobName: thumbs\n    job: {services: [{name: main, image: hello}]}\n")
	f.fails(ExitError, "FAILED_PRECONDITION: bundle \"news\" has changed", "bundle", "update", "-f", upd, "--revision", "1")
	out = f.ok("bundle", "update", "-f", upd)
	if !regexp.MustCompile(`^Bundle news updated: revision \d+\n$`).MatchString(out) || f.srv.Job("news.thumbs.1") == nil {
		t.Errorf("bundle update: %q", out)
	}
	f.fails(ExitError, "the spec has no bundleId", "bundle", "update", "-f", writeFile(t, "noid.yaml", "jobs: [{jobName: a, job: {}}]"))

	// Delete: the bundle and its jobs go.
	out = f.ok("bundle", "delete", "news")
	if out != "Bundle news is being deleted: its jobs are stopped, then removed with it\n" {
		t.Errorf("bundle delete: %q", out)
	}
	f.fails(ExitError, "NOT_FOUND", "bundle", "show", "news")
	f.fails(ExitError, "NOT_FOUND", "job", "get", "news.channel.1")
	y := f.ok("bundle", "list", "-o", "yaml")
	if strings.Contains(y, "news") || !strings.Contains(y, "bundleId: b-") {
		t.Errorf("bundle list -o yaml after delete:\n%s", y)
	}
}

func TestBundleUsageErrors(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t} // no Manager: none of these may reach one
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bundle", "create"}, "give the bundle spec with -f FILE"},
		{[]string{"bundle", "show"}, "takes 1 argument(s) (ID)"},
		{[]string{"bundle", "start-job", "b", "0"}, "takes 3 argument(s) (ID REPLICA JOBNAME)"},
		{[]string{"bundle", "start-job", "b", "primary", "j"}, `REPLICA "primary": want a replica index`},
		{[]string{"bundle", "stop-job", "b", "0", "j", "--grace", "-1s"}, "--grace must not be negative"},
		{[]string{"bundle", "stop-time", "b"}, "give exactly one of --at, --in and --clear"},
		{[]string{"bundle", "stop-time", "b", "--in", "1h", "--clear"}, "give exactly one of --at, --in and --clear"},
		{[]string{"bundle", "stop-time", "b", "--at", "tomorrow"}, `--at "tomorrow": want a time in RFC 3339`},
		{[]string{"bundle", "stop-time", "b", "--in", "soon"}, `--in "soon": want a duration`},
		{[]string{"bundle", "renew-lease", "b"}, "--ttl is required"},
		{[]string{"bundle", "renew-lease", "b", "--ttl", "-5s"}, `--ttl "-5s"`},
	} {
		code, _, errOut := f.run("", tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("norsk-ctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.msg)
		}
	}
}

// readExampleBundle decodes examples/bundles/<name> as bundle create does and
// validates it as the Manager does.
func readExampleBundle(t *testing.T, name string) *norsk.Bundle {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "bundles", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := norsk.DecodeBundleSpec(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := jobspec.ValidateBundle(b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// The example bundles parse and validate; the resilient ones run the demo
// job of norsk-manager dev (per runtime).
func TestExampleBundles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, demo string }{
		{"resilient-process.yaml", "hello-process"},
		{"resilient.yaml", "hello"},
	} {
		b := readExampleBundle(t, tc.file)
		if b.GetResiliencePolicy().GetSameNode() != norsk.AntiAffinityForbid || len(b.GetJobs()) != 1 {
			t.Fatalf("%s = %v", tc.file, b)
		}
		j := b.GetJobs()[0]
		if j.GetJobName() != "channel" || j.GetRequirements().GetRequiredCapacity() != 0.5 {
			t.Errorf("%s: job %v", tc.file, j)
		}
		demo, err := jobs.Load(tc.demo)
		if err != nil {
			t.Fatal(err)
		}
		if len(demo.GetServices()) != len(j.GetJob().GetServices()) {
			t.Fatalf("%s: the template's services differ from examples/jobs/%s.yaml", tc.file, tc.demo)
		}
		for i, s := range demo.GetServices() {
			if !proto.Equal(s, j.GetJob().GetServices()[i]) {
				t.Errorf("%s: service %s differs from examples/jobs/%s.yaml:\n%v\n%v", tc.file, s.GetName(), tc.demo, j.GetJob().GetServices()[i], s)
			}
		}
	}

	// The unplaceable bundle: created, and every node refuses its job on
	// capacity.
	b := readExampleBundle(t, "unplaceable.yaml")
	if c := b.GetJobs()[0].GetRequirements().GetRequiredCapacity(); c != 64 {
		t.Fatalf("unplaceable.yaml asks for capacity %v", c)
	}
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "dev-worker-1", Hardware: &managerv1.Hardware{Vcpus: 16}})
	f.srv.AddNode(&managerv1.Node{NodeId: "dev-worker-2", Hardware: &managerv1.Hardware{Vcpus: 64}})
	f.ok("bundle", "create", "-f", filepath.Join("..", "..", "examples", "bundles", "unplaceable.yaml"))
	out := f.ok("job", "why", "unplaceable.channel.0")
	matches(t, "job why", out, `cannot be placed now`, `(?m)^dev-worker-1\s+refused\s+capacity: `, `(?m)^dev-worker-2\s+refused\s+capacity: `)
}

// The sample media bundle parses and validates, one replica of the sample
// job (what the README migrates).
// The two are the same bundle, one per runtime (X.yaml docker,
// X-process.yaml the process runtime), each running the matching
// examples/jobs spec's service.
func TestExampleSampleMediaBundle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, job string }{
		{"sample-media.yaml", "sample-media"},
		{"sample-media-process.yaml", "sample-media-process"},
	} {
		b := readExampleBundle(t, tc.file)
		if b.GetBundleId() != "sample-media" || b.GetResiliencePolicy() != nil || len(b.GetJobs()) != 1 {
			t.Fatalf("%s = %v", tc.file, b)
		}
		job, err := jobs.Load(tc.job)
		if err != nil {
			t.Fatal(err)
		}
		want, got := job.GetServices()[0], b.GetJobs()[0].GetJob().GetServices()[0]
		if !proto.Equal(want, got) {
			t.Errorf("%s: service differs from examples/jobs/%s.yaml:\n%v\n%v", tc.file, tc.job, got, want)
		}
	}
}

// bundle create of a spec no node's runtime can run is accepted and says
// why its jobs run nowhere (issue 12 item 11).
func TestBundleCreateExplainsRuntime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1", Runtime: "process", Hardware: &managerv1.Hardware{Vcpus: 4}})
	spec := writeFile(t, "img.yaml", "bundleId: img\njobs: [{jobName: channel, job: {services: [{name: web, image: nginx}]}}]\n")
	out := f.ok("bundle", "create", "-f", spec)
	want := "Bundle img created (norsk-ctl bundle show img).\n" +
		`Note: job img.channel.0 runs nowhere for now: no node's runtime can run the job: runtime process cannot run image-only services (process runs commands): "web" has an image and no command` + "\n"
	if out != want {
		t.Errorf("bundle create printed %q, want %q", out, want)
	}
	code, out, errOut := f.run("", "bundle", "create", "-f", writeFile(t, "img2.yaml", "bundleId: img2\njobs: [{jobName: channel, job: {services: [{name: web, image: nginx}]}}]\n"), "-o", "json")
	var c bundles.BundleCreated
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "runtime process cannot run") {
		t.Errorf("-o json: %d %q %q", code, out, errOut)
	}
}

// bundle create --wait follows the bundle until its jobs run, and says
// which do not when it gives up.
func TestBundleCreateWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1", Address: "127.0.0.1:1", State: managerv1.NodeState_NODE_STATE_ONLINE, Hardware: &managerv1.Hardware{Vcpus: 4}})
	spec := writeFile(t, "w.yaml", "bundleId: w\njobs: [{jobName: channel, job: {services: [{name: main, command: [sleep, '60']}]}}]\n")
	// Nothing places it: --wait gives up, naming the job.
	code, _, errOut := f.run("", "bundle", "create", "-f", spec, "--wait", "--wait-timeout", "600ms")
	if code != ExitError || !strings.Contains(errOut, "bundle w: not every job runs after 600ms: w.channel.0 (not placed)") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// Started while it waits: it returns once the job runs.
	spec2 := writeFile(t, "w2.yaml", "bundleId: w2\njobs: [{jobName: channel, job: {services: [{name: main, command: [sleep, '60']}]}}]\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var out, e strings.Builder
			g := globalsFor(strings.NewReader(""), &out, &e)
			if run(t.Context(), g, []string{"--manager-url", f.srv.URL, "job", "start", "w2.channel.0", "--node", "node-1", "--wait=false"}) == 0 {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	code, out, errOut := f.run("", "bundle", "create", "-f", spec2, "--wait", "--wait-timeout", "20s")
	<-done
	if code != 0 || !strings.Contains(out, "Bundle w2 created") || !strings.Contains(errOut, "Every job of bundle w2 runs.") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
