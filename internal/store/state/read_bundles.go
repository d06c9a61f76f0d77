package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
	"github.com/norsk-go/norsk-manager/pkg/placement"
)

// Bundle returns the bundle with the given id, or nil. Callers must not
// modify it.
func (r *Read) Bundle(ws memdb.WatchSet, id string) *managerv1.Bundle {
	if raw := r.first(ws, tableBundles, "id", id); raw != nil {
		return raw.(*managerv1.Bundle)
	}
	return nil
}

// Bundles returns every bundle in id order.
func (r *Read) Bundles(ws memdb.WatchSet) []*managerv1.Bundle {
	var out []*managerv1.Bundle
	it := r.iter(ws, tableBundles, "id_prefix", "")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*managerv1.Bundle))
	}
	return out
}

// BundleView is a bundle with each of its replica jobs and where it runs:
// the soft rules its node breaks (from its placement), the repair under
// way when the AutoManager is moving it to a node that complies, and, for
// a job running nowhere that no node's runtime can run, why.
func (r *Read) BundleView(b *managerv1.Bundle) *managerv1.BundleWithJobs {
	out := &managerv1.BundleWithJobs{Bundle: b}
	var nodes []*managerv1.Node // read once, when a job runs nowhere
	for rep := 0; rep < jobspec.Replicas(b); rep++ {
		for _, spec := range b.GetJobs() {
			id := jobspec.BundleJobID(b.GetBundleId(), spec.GetJobName(), rep)
			st := &managerv1.BundleJobStatus{JobId: id, JobName: spec.GetJobName(), ReplicaIndex: uint32(rep), Role: jobspec.ReplicaRole(rep)}
			rec := r.Job(nil, id)
			if rec != nil {
				st.Dormant = rec.GetJob().GetTags()[jobspec.TagDormant] == "true"
				st.TerminalState = rec.GetJob().GetTerminalState()
			}
			in := jobspec.SlotInstance(r.InstancesOfJob(nil, id), st.Role)
			if in != nil {
				st.NodeId = in.GetNodeId()
				st.Phase = in.GetPhase()
				for _, d := range in.GetPlacement().GetDegradations() {
					st.Degradations = append(st.Degradations, d.GetRule()+": "+d.GetReason())
				}
			}
			if m := r.MigrationInFlight(nil, id); m != nil && m.GetRepair() {
				st.Degradations = append(st.Degradations, fmt.Sprintf("repair: %s (migration %s to %s, %s)",
					m.GetReason(), m.GetMigrationId(), m.GetTargetNodeId(), MigrationPhaseName(m.GetPhase())))
			}
			if rec != nil && st.TerminalState == nil && !st.Dormant && (in == nil || in.GetPhase() == managerv1.InstancePhase_INSTANCE_PHASE_STOPPED) {
				if nodes == nil {
					for _, n := range r.Nodes(nil) {
						nodes = append(nodes, n.GetNode())
					}
				}
				if why := placement.RuntimeMismatch(nodes, rec.GetJob()); why != "" {
					st.Degradations = append(st.Degradations, string(placement.RuleRuntime)+": "+why)
				}
			}
			out.Jobs = append(out.Jobs, st)
		}
	}
	return out
}

// LeaseState is whether leases are paused (never nil).
func (r *Read) LeaseState() *storev1.LeaseState {
	if raw := r.first(nil, tableSingletons, "id", singletonLeases); raw != nil {
		return raw.(*singleton).Msg.(*storev1.LeaseState)
	}
	return &storev1.LeaseState{}
}
