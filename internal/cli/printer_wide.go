package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/pkg/placement"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// The -o wide forms of the list commands: the table's columns and more, as
// kubectl's. Each keeps the table's first column (the id) first.

// jobsWideTable adds to jobsTable where each live instance runs, the
// services' images, restarts, the job's age, when its spec last changed,
// its revision (hash) and how it is placed. The age and update time come
// from the job's history (job list asks for it with -o wide).
func jobsWideTable(w io.Writer, now time.Time, jobs []*norsk.JobWithHistory) {
	fmt.Fprintln(w, "ID\tSTATE\tINSTANCES\tNODES\tIMAGES\tRESTARTS\tAGE\tUPDATED\tHASH\tPLACEMENT\tTAGS\tDESCRIPTION")
	for _, j := range jobs {
		job := j.GetJob()
		state := enumWord(job.GetState())
		if t := job.GetTerminalState(); t != nil {
			state += " (" + enumWord(t.GetKind()) + ")"
		}
		var instances, nodes []string
		restarts := uint32(0)
		for _, in := range j.GetInstances() {
			restarts += in.GetRestarts()
			if in.GetPhase() == norsk.InstancePhaseStopped {
				continue
			}
			instances = append(instances, in.GetRole()+" "+enumWord(in.GetPhase()))
			if !slices.Contains(nodes, in.GetNodeId()) {
				nodes = append(nodes, in.GetNodeId())
			}
		}
		var images []string
		for _, s := range job.GetServices() {
			if img := shortImage(s.GetImage()); img != "" && !slices.Contains(images, img) {
				images = append(images, img)
			}
		}
		created, updated := jobTimes(j)
		placed := "manual"
		if job.GetAutoPlacement() != nil {
			placed = "auto"
		}
		if job.GetLeaseProtected() {
			placed += ",lease"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", job.GetJobId(), state,
			dash(strings.Join(instances, ", ")), dash(strings.Join(nodes, ",")), dash(strings.Join(images, ",")),
			restarts, ago(now, created), ago(now, updated), job.GetCurrentHash(), placed, tags(job.GetTags()), dash(job.GetDescription()))
	}
}

// jobTimes finds in a job's history (newest first) when it was created and
// when its spec last changed (its creation when never updated); nil when
// the history does not say.
func jobTimes(j *norsk.JobWithHistory) (created, updated *timestamppb.Timestamp) {
	for _, h := range j.GetHistory() {
		switch {
		case h.GetUpdated() != nil && updated == nil:
			updated = h.GetTimestamp()
		case h.GetCreated() != nil:
			created = h.GetTimestamp()
		}
	}
	if updated == nil {
		updated = created
	}
	return created, updated
}

// nodesWideTable adds to nodesTable the node's pool tier, runtime, worker
// version, architecture, cloud instance type and region, how many images it
// holds, and when the Manager last heard from it.
func nodesWideTable(w io.Writer, now time.Time, nodes []*norsk.Node) {
	fmt.Fprintln(w, "ID\tNAME\tPROVIDER\tPOOL\tSTATE\tSINCE\tADDRESS\tRUNTIME\tVERSION\tARCH\tTYPE\tREGION\tCPUS\tMEMORY\tLOAD\tJOBS\tHELD\tLAST SEEN\tTAGS")
	for _, n := range nodes {
		load := "-"
		if l := n.GetLoad(); l != nil {
			load = fmt.Sprintf("%.0f%%", l.GetCpuPercent())
		}
		cpus := "-"
		if v := n.GetHardware().GetVcpus(); v > 0 {
			cpus = fmt.Sprint(v)
		}
		arch := "-"
		if a := n.GetHardware().GetArchitecture(); a != norsk.ArchitectureUnspecified {
			arch = enumWord(a)
		}
		region := n.GetCloud().GetRegion()
		if z := n.GetCloud().GetZone(); z != "" {
			region = z
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.GetNodeId(), dash(n.GetNodeName()),
			dash(n.GetProvider()), dash(n.GetTags()[placement.TagPool]), nodeStateWords(n), ago(now, n.GetStateSince()), dash(n.GetAddress()),
			dash(n.GetRuntime()), dash(n.GetWorkerVersion()), arch, dash(n.GetCloud().GetInstanceType()), dash(region),
			cpus, bytesIEC(n.GetHardware().GetMemoryBytes()), load, len(n.GetInstances()), len(n.GetHeldImages()),
			ago(now, n.GetLastSeen()), tags(n.GetTags()))
	}
}

// bundlesWideTable adds to bundlesTable the nodes its replica jobs are
// placed on, its revision, its age, its stop time and its lease.
func bundlesWideTable(w io.Writer, now time.Time, list []*norsk.BundleWithJobs) {
	fmt.Fprintln(w, "BUNDLE\tSTATE\tPOOL\tREPLICAS\tJOBS\tPLACED\tNODES\tREVISION\tAGE\tSTOPS\tLEASE")
	for _, bw := range list {
		b := bw.GetBundle()
		placedN := 0
		var nodes []string
		for _, j := range bw.GetJobs() {
			if placed(j) {
				placedN++
				if !slices.Contains(nodes, j.GetNodeId()) {
					nodes = append(nodes, j.GetNodeId())
				}
			}
		}
		slices.Sort(nodes)
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d/%d\t%s\t%d\t%s\t%s\t%s\n", b.GetBundleId(), enumWord(b.GetState()), dash(b.GetPool()),
			bundleReplicas(bw), len(b.GetJobs()), placedN, len(bw.GetJobs()), dash(strings.Join(nodes, ",")), b.GetRevision(),
			ago(now, b.GetCreatedAt()), ago(now, b.GetStopAt()), ago(now, b.GetLeaseExpiresAt()))
	}
}

// migrationsWideTable adds to the migration list the source and target
// roles, how long the migration took (or has taken so far), whether it is
// past the point of no return, and who asked for it.
func migrationsWideTable(w io.Writer, now time.Time, all []*norsk.MigrationState) {
	fmt.Fprintln(w, "ID\tJOB\tSTRATEGY\tPHASE\tFROM\tTO\tROLES\tSTARTED\tTOOK\tNO RETURN\tBY\tREASON")
	for _, st := range all {
		took := "-"
		if start := st.GetStartedAt(); start != nil {
			end := now
			if p := st.GetPhase(); p == norsk.PhaseDone || p == norsk.PhaseAborted {
				if h := st.GetPhaseHistory(); len(h) > 0 {
					end = h[len(h)-1].GetAt().AsTime()
				}
			}
			took = fmtDur(end.Sub(start.AsTime()))
		}
		by := st.GetRequestedBy()
		if st.GetRepair() {
			by = "repair"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s→%s\t%s\t%s\t%v\t%s\t%s\n", st.GetMigrationId(), st.GetSourceJobId(), norsk.StrategyName(st.GetStrategy()),
			norsk.PhaseName(st.GetPhase()), dash(st.GetSourceNodeId()), dash(st.GetTargetNodeId()), dash(st.GetSourceRole()), dash(st.GetTargetRole()),
			ago(now, st.GetStartedAt()), took, st.GetPastPointOfNoReturn(), dash(by), dash(st.GetAbortReason()))
	}
}
