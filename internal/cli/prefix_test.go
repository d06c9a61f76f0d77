package cli

import (
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Jobs, nodes, bundles and cluster slots are named by a unique prefix, as
// migrations are: an exact id wins, an ambiguous prefix is a usage error
// naming the candidates, a prefix of nothing is NOT_FOUND.
func TestIDPrefixes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, id := range []string{"news-1", "news-10", "sport-1"} {
		f.ok("job", "create", "-f", writeFile(t, id+".yaml", "jobId: "+id+"\nservices: [{name: main, image: x}]"))
	}
	f.srv.AddNode(&managerv1.Node{NodeId: "node-a1", Hardware: &managerv1.Hardware{Vcpus: 4}})
	f.srv.AddNode(&managerv1.Node{NodeId: "node-a2", Hardware: &managerv1.Hardware{Vcpus: 4}})
	f.srv.AddNode(&managerv1.Node{NodeId: "node-b", Hardware: &managerv1.Hardware{Vcpus: 4}})
	f.ok("bundle", "create", "-f", writeFile(t, "b.yaml", "bundleId: evening\njobs: [{jobName: solo, job: {services: [{name: main, command: [sleep, '60']}]}}]"))
	f.ok("slot", "register", "rack-1")

	for _, tc := range []struct {
		args []string
		want string // in the output
	}{
		{[]string{"job", "get", "sport", "-o", "name"}, "job/sport-1\n"},
		{[]string{"job", "get", "news-1", "-o", "name"}, "job/news-1\n"}, // exact wins over news-10
		{[]string{"job", "get", "news-10", "-o", "name"}, "job/news-10\n"},
		{[]string{"job", "history", "spo"}, "created"},
		{[]string{"node", "get", "node-b", "-o", "name"}, "node/node-b\n"},
		{[]string{"node", "get", "node-a2", "-o", "name"}, "node/node-a2\n"},
		{[]string{"node", "tag", "node-b", "az=x"}, "az=x"},
		{[]string{"bundle", "show", "eve", "-o", "name"}, "bundle/evening\n"},
	} {
		if out := f.ok(tc.args...); !strings.Contains(out, tc.want) {
			t.Errorf("norsk-ctl %s printed %q, want %q in it", strings.Join(tc.args, " "), out, tc.want)
		}
	}
	f.fails(ExitUsage, `job "news" is ambiguous: it begins news-1, news-10`, "job", "get", "news")
	f.fails(ExitUsage, `node "node-a" is ambiguous: it begins node-a1, node-a2`, "node", "get", "node-a")
	f.fails(ExitUsage, `node "node-a" is ambiguous: it begins node-a1, node-a2`, "node", "drain", "node-a")
	f.fails(ExitUsage, `--node: node "node-" is ambiguous`, "job", "start", "sport", "--node", "node-")
	f.fails(ExitUsage, `--to: node "node-a" is ambiguous: it begins node-a1, node-a2`, "migrate", "sport-1", "--to", "node-a")
	f.fails(ExitError, "NOT_FOUND", "job", "delete", "zzz")
	f.fails(ExitError, `TerminateNode: NOT_FOUND: no node "zzz"`, "node", "terminate", "zzz")
	f.fails(ExitError, "NOT_FOUND", "bundle", "delete", "zzz")
	f.ok("slot", "set-pool", "rack", "gold") // the one slot whose id begins rack (a slot's id is its name)
	if code, out, errOut := f.run("", "job", "delete", "spo"); code != 0 || !strings.Contains(out, "sport-1") {
		t.Errorf("job delete spo: exit %d, %q, %q", code, out, errOut)
	}
}
