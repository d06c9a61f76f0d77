package devmode

import (
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// dev --ch-hosts 1 --workers 0: a bundle nothing else runs makes the
// AutoManager create a microVM node on the host agent through Cloud
// Hypervisor's REST API (the local VMM); its guest's worker registers and
// runs the job; deleting the bundle lets the reaper terminate the node,
// and its VM is deleted (its directory gone, its VMM ended).
func TestDevCHHosts(t *testing.T) {
	d := startElasticDev(t, Options{CHHosts: 1})
	d.wantBanner("Cloud Hypervisor host agents: dev-ch-1", "norsk-ctl node create-ch --host dev-ch-1", "examples/bundles/microvm-process.yaml")
	d.eventually("the host agent's shapes", func() bool {
		r, err := d.api.ListInstanceTypes(t.Context(), connect.NewRequest(&managerv1.ListInstanceTypesRequest{Provider: "cloud-hypervisor"}))
		return err == nil && r.Msg.GetKnown() && len(r.Msg.GetInstanceTypes()) == len(chShapes)
	})
	n := d.bundleOnNewNode("microvm", CHPool, "a new microVM node")
	if n.GetProvider() != "cloud-hypervisor" || n.GetCloud().GetInstanceType() != "ch.large" || n.GetCloud().GetRegion() != "dev-ch-1" {
		t.Fatalf("the job runs on %v; want a cloud-hypervisor ch.large node on dev-ch-1", n)
	}
	vms := filepath.Join(d.dir, "ch", "dev-ch-1", "vms")
	if ents, err := os.ReadDir(vms); err != nil || len(ents) != 1 {
		t.Fatalf("VM directories %v, %v; want one", ents, err)
	}
	d.deleteUntilReaped("microvm", n.GetNodeId())
	d.eventually("its VM deleted", func() bool {
		ents, err := os.ReadDir(vms)
		return err == nil && len(ents) == 0
	})
}
