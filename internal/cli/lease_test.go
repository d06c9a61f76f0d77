package cli

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/cli/cluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

func TestLeaseUsageErrors(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t} // no Manager: none of these may reach one
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"lease", "bogus"}, `unknown command "bogus" for "norsk-ctl lease"`},
		{[]string{"lease", "status", "x"}, "takes 0 argument(s)"},
		{[]string{"lease", "pause"}, "--reason is required"},
		{[]string{"lease", "pause", "--by", "alice"}, "--reason is required"},
		{[]string{"lease", "resume", "x"}, "takes 0 argument(s)"},
	} {
		code, _, errOut := f.run("", tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("norsk-ctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.msg)
		}
	}
}

func TestLeaseCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1"})
	m, err := norsk.Connect(t.Context(), norsk.Settings{URL: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.CreateJob(t.Context(), &norsk.Job{JobId: "guarded", LeaseProtected: true, Services: []*norsk.Service{{Name: "main", Image: "hello:dev"}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := m.StartJob(t.Context(), "guarded", "primary", "node-1", norsk.StartJobOptions{})
	if err != nil {
		t.Fatal(err)
	}

	out := f.ok("lease", "status")
	for _, re := range []string{
		`(?m)^Leases running \(TTL 15s\)$`,
		`(?m)^JOB\s+ROLE\s+NODE\s+TOKEN\s+REFRESHED\s+EXPIRES\s+EXPIRED$`,
		`(?m)^guarded\s+primary\s+node-1\s+` + strconv.FormatUint(tok, 10) + `\s+3m ago\s+\S+ ago\s+no$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("lease status: no match for %s in\n%s", re, out)
		}
	}

	if out := f.ok("lease", "pause", "--reason", "upgrading the Manager", "--by", "alice"); !strings.HasPrefix(out, "Leases paused by alice: upgrading the Manager\n") {
		t.Fatalf("lease pause: %s", out)
	}
	out = f.ok("lease", "status")
	if !regexp.MustCompile(`(?m)^Leases PAUSED since \S+ \(3m ago\) by alice: upgrading the Manager$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^guarded\s+primary\s+node-1\s+\d+\s+3m ago\s+never \(paused\)\s+no$`).MatchString(out) {
		t.Fatalf("lease status while paused:\n%s", out)
	}
	var st struct {
		Paused bool
		Reason string
		By     string
		TtlMs  string
		Leases []struct{ JobId, NodeId string }
	}
	if out := f.ok("-o", "json", "lease", "status"); json.Unmarshal([]byte(out), &st) != nil || !st.Paused || st.By != "alice" ||
		st.TtlMs != "15000" || len(st.Leases) != 1 || st.Leases[0].JobId != "guarded" || st.Leases[0].NodeId != "node-1" {
		t.Fatalf("lease status -o json: %s", out)
	}

	if out := f.ok("lease", "resume", "--by", "bob"); out != "Leases resumed by bob; every lease's grace runs from now.\n" {
		t.Fatalf("lease resume: %q", out)
	}
	if out := f.ok("lease", "status"); !regexp.MustCompile(`(?m)^Leases running \(TTL 15s\); last resumed 3m ago by bob$`).MatchString(out) {
		t.Fatalf("lease status after the resume:\n%s", out)
	}
	// Without --by, the local user is recorded.
	f.ok("lease", "pause", "--reason", "again")
	if out := f.ok("-o", "json", "lease", "status"); json.Unmarshal([]byte(out), &st) != nil || st.By != cluster.DefaultBy() {
		t.Fatalf("lease pause without --by: %s", out)
	}
}
