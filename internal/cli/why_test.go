package cli

import (
	"regexp"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// job why prints where the job would go and, per node, the rules that
// refuse it.
func TestJobWhy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "big", Hardware: &managerv1.Hardware{Vcpus: 8}})
	f.srv.AddNode(&managerv1.Node{NodeId: "small", Hardware: &managerv1.Hardware{Vcpus: 2}})
	f.srv.AddNode(&managerv1.Node{NodeId: "gone", Hardware: &managerv1.Hardware{Vcpus: 64}, State: managerv1.NodeState_NODE_STATE_LOST})
	spec := writeFile(t, "enc.yaml", "jobId: enc\nservices: [{name: main, image: x}]\nautoPlacement: {requirements: {requiredCapacity: 2}}\n")
	f.ok("job", "create", "-f", spec)
	out := f.ok("job", "why", "enc")
	for _, want := range []string{`Job enc would be placed on big\.`, `(?m)^\s*big\s+chosen`, `(?m)^\s*small\s+refused\s+capacity: `, `(?m)^\s*gone\s+refused\s+exclusion: .*the node is lost`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("job why output does not match %q:\n%s", want, out)
		}
	}
	f.fails(ExitError, "not found", "job", "why", "nope")
}
