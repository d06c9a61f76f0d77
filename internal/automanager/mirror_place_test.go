package automanager

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// TestMirrorPlacementStateMatchesFresh: after any sequence of events —
// jobs whose instances come, move, stop and go, jobs deleted, bundles
// changed or deleted, nodes added, changed (state, tags, vCPUs, held
// images) or gone, whole node lists read again — and passes that build
// the mirror's placement state at any point between them, the state the
// mirror keeps holds what a state built afresh from the mirror's jobs,
// bundles and nodes holds, and places a request exactly as that one does.
func TestMirrorPlacementStateMatchesFresh(t *testing.T) {
	t.Parallel()
	genNode := func(t *rapid.T, id string) *managerv1.Node {
		n := node(id, "rack", rapid.SampledFrom([]string{"r1", "r2"}).Draw(t, "rack"))
		n.State = rapid.SampledFrom([]managerv1.NodeState{nodeOnline, nodeOnline, nodeOnline, nodeStopping, nodeStarting,
			managerv1.NodeState_NODE_STATE_LOST}).Draw(t, "state")
		n.Elastic = rapid.Bool().Draw(t, "elastic")
		n.Hardware.Vcpus = uint32(rapid.IntRange(1, 8).Draw(t, "vcpus"))
		if rapid.Bool().Draw(t, "held") {
			n.HeldImages = []*managerv1.HeldImage{{Ref: rapid.SampledFrom([]string{"x", "y"}).Draw(t, "ref")}}
		}
		return n
	}
	genJob := func(t *rapid.T, id string) *managerv1.JobWithHistory {
		jh := autoJob(id)
		jh.History = nil
		jh.Job.AutoPlacement.Requirements.RequiredCapacity = rapid.SampledFrom([]float64{0, 0.25, 0.5, 1}).Draw(t, "capacity")
		if b := rapid.IntRange(-1, 1).Draw(t, "bundle"); b >= 0 {
			jh.Job.Tags = map[string]string{placement.TagBundleID: fmt.Sprintf("b%d", b),
				placement.TagJobName: "channel", placement.TagReplicaIndex: strconv.Itoa(rapid.IntRange(0, 1).Draw(t, "replica"))}
		}
		for _, role := range []string{"primary", "backup"} {
			if rapid.IntRange(0, 2).Draw(t, "has-"+role) == 0 {
				continue
			}
			ph := rapid.SampledFrom([]managerv1.InstancePhase{phRunning, phRunning, managerv1.InstancePhase_INSTANCE_PHASE_PROVISIONED,
				managerv1.InstancePhase_INSTANCE_PHASE_STOPPED}).Draw(t, "phase")
			jh.Instances = append(jh.Instances, inst(id, role, fmt.Sprintf("n%d", rapid.IntRange(0, 5).Draw(t, "on")), ph))
		}
		return jh
	}
	rapid.Check(t, func(t *rapid.T) {
		m := newMirror(placement.Config{})
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "event") {
			case 0:
				var nodes []*managerv1.Node
				for i := range rapid.IntRange(0, 6).Draw(t, "nodes") {
					nodes = append(nodes, genNode(t, fmt.Sprintf("n%d", i)))
				}
				m.setNodes(nodes)
			case 1, 2:
				id := fmt.Sprintf("n%d", rapid.IntRange(0, 5).Draw(t, "node"))
				if rapid.IntRange(0, 3).Draw(t, "gone") == 0 {
					m.putNode(id, nil)
				} else {
					m.putNode(id, genNode(t, id))
				}
			case 3:
				id := fmt.Sprintf("b%d", rapid.IntRange(0, 1).Draw(t, "bundle"))
				if rapid.IntRange(0, 2).Draw(t, "deleted") == 0 {
					m.putBundle(id, nil)
				} else {
					m.putBundle(id, bundle(id, rapid.Bool().Draw(t, "resilient")))
				}
			case 4:
				m.deleteJob(fmt.Sprintf("j%d", rapid.IntRange(0, 7).Draw(t, "job")))
			default:
				id := fmt.Sprintf("j%d", rapid.IntRange(0, 7).Draw(t, "job"))
				m.putJob(genJob(t, id))
			}
			if rapid.IntRange(0, 2).Draw(t, "pass") == 0 {
				m.placement() // a pass: built if dropped, kept otherwise
			}
			if m.place == nil {
				continue
			}
			kept := m.place
			var all []*managerv1.Bundle
			for _, b := range m.bundles {
				all = append(all, b)
			}
			view, _, _ := passNodes(m.nodeList, nil)
			want, err := placement.NewState(m.cfg, view, liveAllocations(m.cfg, View{Jobs: m.allJobs(), Bundles: all}, m.reachable))
			if err != nil {
				t.Fatal(err)
			}
			if got, w := kept.Allocations(), want.Allocations(); !reflect.DeepEqual(got, w) {
				t.Fatalf("step %d: kept allocations\n%+v\nfresh\n%+v", step, got, w)
			}
			probe := genJob(t, "probe")
			req := placement.RequestForJob(m.cfg, probe.GetJob(), m.bundles[probe.GetJob().GetTags()[placement.TagBundleID]], "primary")
			req.Explain = true
			got, err := kept.Place(req)
			if err != nil {
				t.Fatal(err)
			}
			w, err := want.Place(req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("step %d: kept state places %+v\nfresh %+v", step, got, w)
			}
		}
	})
}
