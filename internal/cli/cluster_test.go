package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cli/cluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

func TestClusterUsageErrors(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t} // no Manager: none of these may reach one
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"cluster", "bogus"}, `unknown command "bogus" for "norsk-ctl cluster"`},
		{[]string{"cluster", "status", "x"}, "takes 0 argument(s)"},
		{[]string{"cluster", "events", "--limit", "0"}, "--limit must be between 1 and 1000"},
		{[]string{"cluster", "events", "--limit", "1001"}, "--limit must be between 1 and 1000"},
		{[]string{"cluster", "events", "--since", "someday"}, `--since: "someday" is neither`},
		{[]string{"cluster", "add"}, "(NODE)"},
		{[]string{"cluster", "remove", "a", "b"}, "(NODE), got 2"},
		{[]string{"cluster", "force-standalone", "x"}, "takes 0 argument(s)"},
		{[]string{"cluster", "leave-quorum", "--nope"}, "unknown flag: --nope"},
	} {
		code, _, errOut := f.run("", tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("norsk-ctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.msg)
		}
	}
}

func TestClusterMembershipCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	out := f.ok("cluster", "add", "mgr-2", "--by", "alice")
	if !strings.Contains(out, "The cluster expects member mgr-2 (added by alice).") || !strings.Contains(out, "Members now expected: fake-1, mgr-2") ||
		!strings.Contains(out, "clusterState: existing") {
		t.Fatalf("cluster add: %s", out)
	}
	var added struct{ Members []string }
	if out := f.ok("-o", "json", "cluster", "add", "wit-1", "--witness"); json.Unmarshal([]byte(out), &added) != nil || strings.Join(added.Members, ",") != "fake-1,mgr-2,wit-1" {
		t.Fatalf("cluster add --witness -o json: %s", out)
	}
	f.fails(ExitError, "FAILED_PRECONDITION", "cluster", "add", "wit-1")
	f.fails(ExitError, "INVALID_ARGUMENT", "cluster", "add", "bad name")
	// Without --by, the local user is recorded.
	if out := f.ok("cluster", "add", "mgr-3"); !strings.Contains(out, "(added by "+cluster.DefaultBy()+")") {
		t.Errorf("cluster add without --by: %s", out)
	}

	f.srv.JoinClusterMember("mgr-2")
	f.srv.JoinClusterMember("wit-1")
	out = f.ok("cluster", "status")
	for _, re := range []string{
		`(?m)^NAME\s+ROLE\s+REACHABLE\s+VOTER\s+APPLIED\s+GENERATION\s+LAST CONTACT\s+CONTROL PLANE$`,
		`(?m)^fake-1 \*\s+primary\s+yes\s+yes\s+\d+\s+1\s+3m ago\s+-$`,
		`(?m)^mgr-2\s+follower\s+yes\s+yes\s+\d+\s+1\s+3m ago\s+-$`,
		`(?m)^mgr-3\s+unknown\s+no\s+no\s+-\s+-\s+-\s+-$`,
		`(?m)^wit-1\s+witness\s+yes\s+yes\s`,
		`Primary fake-1, generation 1, term 1; quorum healthy: 3/3 voters reachable, quorum 2 \(answered by fake-1 \*\)`,
		`mgr-3: expected: added, not yet joined`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("cluster status: no match for %s in\n%s", re, out)
		}
	}
	var st struct {
		Primary       string
		Voters        int
		Quorum        int
		QuorumHealthy bool
		Members       []struct{ Name, Role string }
	}
	if out := f.ok("-o", "json", "cluster", "status"); json.Unmarshal([]byte(out), &st) != nil || st.Primary != "fake-1" || st.Voters != 3 || st.Quorum != 2 ||
		!st.QuorumHealthy || len(st.Members) != 4 || st.Members[0].Role != "MEMBER_ROLE_PRIMARY" {
		t.Fatalf("cluster status -o json: %s", out)
	}

	if out := f.ok("cluster", "remove", "mgr-3"); !strings.Contains(out, "Member mgr-3 removed from the cluster; stop its Manager now.") {
		t.Errorf("cluster remove: %s", out)
	}
	f.fails(ExitError, "NOT_FOUND", "cluster", "remove", "mgr-3")

	out = f.ok("cluster", "events", "--kind", "member-expected", "--kind", "member-retired", "--limit", "3")
	if !strings.Contains(out, "Cluster events of member fake-1, newest first:") ||
		!regexp.MustCompile(`(?m)^TIME\s+KIND\s+TERM\s+GENERATION\s+DETAIL\n2025-03-01T11:57:00Z\s+member-retired\s+1\s+1\s+mgr-3 was removed from the cluster\n.*member-expected.*mgr-3 was added by`).MatchString(out) ||
		strings.Count(out, "\n2025-") != 3 {
		t.Errorf("cluster events --kind --limit:\n%s", out)
	}
	// The events are three minutes old (the fake's clock).
	if out := f.ok("cluster", "events", "--since", "2m"); !strings.Contains(out, "No cluster events of member fake-1 match.") {
		t.Errorf("cluster events --since 2m:\n%s", out)
	}
	var page struct {
		Member string
		Events []struct{ Kind string }
	}
	if out := f.ok("-o", "json", "cluster", "events", "--since", "2025-03-01T11:00:00Z"); json.Unmarshal([]byte(out), &page) != nil || page.Member != "fake-1" || len(page.Events) != 7 ||
		page.Events[0].Kind != "member-retired" || page.Events[6].Kind != "role-change" {
		t.Errorf("cluster events -o json: %s", out)
	}
}

func TestClusterRecoveryCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("cluster", "add", "mgr-2")
	f.ok("cluster", "add", "mgr-3")
	f.srv.JoinClusterMember("mgr-2")
	f.srv.JoinClusterMember("mgr-3")

	// With a primary, force-standalone is refused by the Manager.
	f.fails(ExitError, "FAILED_PRECONDITION: the primary fake-1 is reachable", "cluster", "force-standalone", "--yes")

	f.srv.SetMemberReachable("mgr-2", false)
	f.srv.SetMemberReachable("mgr-3", false)
	f.srv.SetQuorumLost(true)
	out := f.ok("cluster", "status")
	if !strings.Contains(out, "Primary none, generation 1, term 1; quorum NOT healthy: 1/3 voters reachable, quorum 2") || !strings.Contains(out, "norsk-ctl cluster force-standalone") {
		t.Fatalf("cluster status without quorum:\n%s", out)
	}

	// Not confirmed: nothing happens.
	for _, answer := range []string{"", "no\n", "y"} {
		code, out, errOut := f.run(answer, "cluster", "force-standalone", "--by", "alice")
		if code != ExitError || !strings.Contains(errOut, "a cluster of one at the next generation") || !strings.Contains(errOut, "Error: not confirmed") || out != "" {
			t.Errorf("force-standalone answered %q: exit %d\nstdout %s\nstderr %s", answer, code, out, errOut)
		}
	}
	if f.srv.ClusterGeneration() != 1 {
		t.Fatal("force-standalone ran without confirmation")
	}
	// Confirmed on stdin.
	code, out, errOut := f.run("yes\n", "cluster", "force-standalone", "--by", "alice")
	if code != 0 || !strings.Contains(errOut, "Type yes to go on") ||
		!strings.Contains(out, "Member fake-1 ("+f.srv.URL+") forced standalone by alice: it restarts now as a cluster of one at generation 2") ||
		!strings.Contains(out, "rejoin it as followers automatically when they are started") {
		t.Fatalf("force-standalone confirmed: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if out := f.ok("cluster", "status"); !strings.Contains(out, "Primary fake-1, generation 2, term 2; quorum healthy: 1/1 voters reachable, quorum 1") {
		t.Fatalf("cluster status after force-standalone:\n%s", out)
	}
	if out := f.ok("cluster", "events", "--kind", "force-standalone"); !strings.Contains(out, "alice forced this member standalone") {
		t.Errorf("force-standalone event:\n%s", out)
	}

	// --yes skips the question; -o json prints the generation.
	f.srv.SetQuorumLost(true)
	var forced struct{ Member, Generation string }
	code, out, errOut = f.run("", "-o", "json", "cluster", "force-standalone", "--yes")
	if code != 0 || errOut != "" || json.Unmarshal([]byte(out), &forced) != nil || forced.Generation != "3" || forced.Member != "fake-1" {
		t.Fatalf("force-standalone --yes -o json: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}

	// leave-quorum: refused for the only full member; asks first.
	f.fails(ExitError, "could not hand the role over", "cluster", "leave-quorum", "--yes")
	f.srv.JoinClusterMember("mgr-2")
	if code, _, errOut := f.run("no\n", "cluster", "leave-quorum"); code != ExitError || !strings.Contains(errOut, "discard its copy") || !strings.Contains(errOut, "not confirmed") {
		t.Fatalf("leave-quorum not confirmed: exit %d, %s", code, errOut)
	}
	code, out, errOut = f.run("yes\n", "cluster", "leave-quorum", "--by", "bob")
	if code != 0 || !strings.Contains(out, "is leaving the quorum (asked by bob)") {
		t.Fatalf("leave-quorum: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if out := f.ok("cluster", "status"); !strings.Contains(out, "Primary mgr-2,") || !regexp.MustCompile(`(?m)^fake-1 \*\s+follower\s`).MatchString(out) {
		t.Errorf("cluster status after leave-quorum:\n%s", out)
	}
}

func TestClusterStatusControlPlane(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Announce through the SDK, as norsk-mgr does, ten minutes ago, every
	// minute: stale by the fake's clock (three minutes before the CLI's).
	m, err := norsk.Connect(t.Context(), norsk.Settings{URL: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f.srv.SetClock(func() time.Time { return now.Add(-10 * time.Minute) })
	if err := m.AnnounceControlPlane(t.Context(), "https://mgr-a.example.com", time.Minute); err != nil {
		t.Fatal(err)
	}
	f.srv.SetClock(func() time.Time { return now.Add(-3 * time.Minute) })
	if out := f.ok("cluster", "status"); !regexp.MustCompile(`(?m)^fake-1 \*\s+primary\s.*\s+https://mgr-a\.example\.com \(stale, announced 10m ago\)$`).MatchString(out) {
		t.Errorf("cluster status with a stale control plane:\n%s", out)
	}
	// Announced again without an interval: never stale.
	if err := m.AnnounceControlPlane(t.Context(), "https://mgr-b.example.com", 0); err != nil {
		t.Fatal(err)
	}
	if out := f.ok("cluster", "status"); !regexp.MustCompile(`(?m)^fake-1 \*\s+primary\s.*\s+https://mgr-b\.example\.com$`).MatchString(out) {
		t.Errorf("cluster status with a control plane:\n%s", out)
	}
}

func TestLinearizableFlag(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("kv", "put", "app", "k", "v")
	f.srv.SetQuorumLost(true)
	if out := f.ok("kv", "get", "app", "k"); !strings.Contains(out, "v") || f.srv.LastConsistency() != "" {
		t.Errorf("kv get without a primary: %s (header %q)", out, f.srv.LastConsistency())
	}
	f.fails(ExitError, "UNAVAILABLE", "--linearizable", "kv", "get", "app", "k")
	// The cluster's own calls work without a primary even so.
	f.ok("--linearizable", "cluster", "status")
	f.ok("--linearizable", "cluster", "force-standalone", "--yes")
	f.ok("--linearizable", "kv", "get", "app", "k")
	if f.srv.LastConsistency() != "linearizable" {
		t.Errorf("kv get --linearizable sent %q", f.srv.LastConsistency())
	}
}
