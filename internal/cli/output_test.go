package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// -o name prints NOUN/ID per object and -o go-template runs a template on
// the JSON form; get and show name the same command for every noun.
func TestOutputNameAndTemplate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1"})
	f.srv.AddNode(&managerv1.Node{NodeId: "node-2"})
	for _, id := range []string{"news-1", "sport-1"} {
		f.ok("job", "create", "-f", writeFile(t, id+".yaml", "jobId: "+id+"\nservices: [{name: main, image: x}]"))
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"job", "list", "-o", "name"}, "job/news-1\njob/sport-1\n"},
		{[]string{"job", "get", "news-1", "-o", "name"}, "job/news-1\n"},
		{[]string{"job", "show", "news-1", "-o", "name"}, "job/news-1\n"},
		{[]string{"node", "list", "-o", "name"}, "node/node-1\nnode/node-2\n"},
		{[]string{"node", "show", "node-2", "-o", "name"}, "node/node-2\n"},
		{[]string{"job", "list", "-o", "go-template={{range .}}{{.job.jobId}} {{end}}"}, "news-1 sport-1 "},
		{[]string{"node", "get", "node-1", "-o", "go-template={{.nodeId}}"}, "node-1"},
	}
	for _, tc := range cases {
		if got := f.ok(tc.args...); got != tc.want {
			t.Errorf("%s = %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	f.fails(ExitUsage, "-o go-template", "job", "list", "-o", "go-template={{range}")

	// job list --state and --node.
	f.ok("job", "start", "sport-1", "--node", "node-2")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "running"}, "job/sport-1\n"},
		{[]string{"--state", "pre"}, "job/news-1\n"},
		{[]string{"--node", "node-2"}, "job/sport-1\n"},
		{[]string{"--node", "node-1"}, ""},
		{[]string{"--state", "running", "--node", "node-1"}, ""},
	} {
		if got := f.ok(append([]string{"job", "list", "-o", "name"}, tc.args...)...); got != tc.want {
			t.Errorf("job list %v = %q, want %q", tc.args, got, tc.want)
		}
	}
	f.fails(ExitUsage, "invalid output format", "job", "list", "-o", "names")
}

// A worker's registration token is --token's (or its user data's), never
// $NORSK_TOKEN, an operator's API token. Not parallel: it sets the
// environment.
func TestWorkerNeverTakesTheAPITokenFromTheEnvironment(t *testing.T) {
	t.Setenv("NORSK_TOKEN", "nrt_operators-api-token")
	f := newFixture(t)
	code, _, errOut := f.run("", "worker", "--data-dir", t.TempDir(), "--manager-url", f.srv.URL, "--runtime", "process")
	if code != ExitUsage || !strings.Contains(errOut, "give the registration token with --token") {
		t.Fatalf("worker with only $NORSK_TOKEN: exit %d, %q; want a usage error asking for --token", code, errOut)
	}
}

// job list --watch prints the list, then again after a change, until
// interrupted.
func TestListWatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("job", "create", "-f", writeFile(t, "f.yaml", "jobId: first\nservices: [{name: main, image: x}]"))
	out := &syncBuffer{}
	g := globalsFor(strings.NewReader(""), out, io.Discard)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int)
	go func() { done <- run(ctx, g, []string{"--manager-url", f.srv.URL, "job", "list", "-w", "-o", "name"}) }()
	waitFor(t, "the first list", func() bool { return strings.Contains(out.String(), "job/first\n") })
	f.ok("job", "create", "-f", writeFile(t, "w.yaml", "jobId: watched\nservices: [{name: main, image: x}]"))
	waitFor(t, "the list printed again with the new job", func() bool { return strings.Contains(out.String(), "job/watched\n") })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("interrupted watch: exit %d", code)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Completion offers the Manager's ids (jobs, nodes, migrations) and the
// values of enum flags.
func TestCompletion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1"})
	f.ok("job", "create", "-f", writeFile(t, "c.yaml", "jobId: comp-1\nservices: [{name: main, image: x}]"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "job", "get", ""}, "comp-1\t"},
		{[]string{"__complete", "job", "start", "comp-1", "--node", ""}, "node-1\t"},
		{[]string{"__complete", "migrate", "comp-1", "--strategy", ""}, "handover\n"},
		{[]string{"__complete", "worker", "--runtime", ""}, "process\n"},
		{[]string{"__complete", "migration", "show", ""}, ":4\n"}, // none yet: no files offered
	} {
		if out := f.ok(tc.args...); !strings.Contains(out, tc.want) {
			t.Errorf("%v = %q, want it to contain %q", tc.args, out, tc.want)
		}
	}
}

// job get -o yaml | job update -f - round-trips: what get prints is a spec
// update reads, its currentHash the concurrency check.
func TestJobGetUpdateRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("job", "create", "-f", writeFile(t, "r.yaml", "jobId: rt-1\ndescription: before\nservices: [{name: main, image: x}]"))
	for _, format := range []string{"yaml", "json"} {
		got := f.ok("job", "get", "rt-1", "-o", format)
		edited := strings.Replace(got, "before", "after-"+format, 1)
		if edited == got {
			t.Fatalf("job get -o %s has no description to edit:\n%s", format, got)
		}
		code, out, errOut := f.run(edited, "job", "update", "-f", "-")
		if code != 0 {
			t.Fatalf("job get -o %s | job update -f -: exit %d: %s%s", format, code, out, errOut)
		}
		if again := f.ok("job", "get", "rt-1", "-o", format); !strings.Contains(again, "after-"+format) {
			t.Fatalf("after the update:\n%s", again)
		}
		// The same document again is refused: its hash is no longer current.
		if code, _, errOut := f.run(edited, "job", "update", "-f", "-"); code == 0 || !strings.Contains(errOut, "FAILED_PRECONDITION") {
			t.Errorf("a stale update: exit %d, %s", code, errOut)
		}
		edited = strings.Replace(again(f, format), "after-"+format, "before", 1)
		if code, _, errOut := f.run(edited, "job", "update", "-f", "-"); code != 0 {
			t.Fatalf("reset: %s", errOut)
		}
	}
}

func again(f *fixture, format string) string { return f.ok("job", "get", "rt-1", "-o", format) }

// node drain --undo sends the undo alone (the Manager refuses an undo that
// carries options, and the flags have defaults).
func TestDrainUndoCarriesNoOption(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1"})
	f.ok("node", "drain", "node-1", "--no-wait")
	f.ok("node", "drain", "node-1", "--undo")
	f.fails(ExitUsage, "--undo takes no other drain option", "node", "drain", "node-1", "--undo", "--parallel", "3")
}
