package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"google.golang.org/protobuf/types/known/timestamppb"
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
