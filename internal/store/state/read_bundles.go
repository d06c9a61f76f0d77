package state

import (
	"github.com/hashicorp/go-memdb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/jobspec"
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

// BundleView is a bundle with each of its replica jobs and where it runs.
func (r *Read) BundleView(b *managerv1.Bundle) *managerv1.BundleWithJobs {
	out := &managerv1.BundleWithJobs{Bundle: b}
	for rep := 0; rep < jobspec.Replicas(b); rep++ {
		for _, spec := range b.GetJobs() {
			id := jobspec.BundleJobID(b.GetBundleId(), spec.GetJobName(), rep)
			st := &managerv1.BundleJobStatus{JobId: id, JobName: spec.GetJobName(), ReplicaIndex: uint32(rep), Role: jobspec.ReplicaRole(rep)}
			if rec := r.Job(nil, id); rec != nil {
				st.Dormant = rec.GetJob().GetTags()[jobspec.TagDormant] == "true"
				st.TerminalState = rec.GetJob().GetTerminalState()
			}
			if in := jobspec.SlotInstance(r.InstancesOfJob(nil, id), st.Role); in != nil {
				st.NodeId = in.GetNodeId()
				st.Phase = in.GetPhase()
				for _, d := range in.GetPlacement().GetDegradations() {
					st.Degradations = append(st.Degradations, d.GetRule()+": "+d.GetReason())
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
