package jobs

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
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
		state := cmdutil.EnumWord(job.GetState())
		if t := job.GetTerminalState(); t != nil {
			state += " (" + cmdutil.EnumWord(t.GetKind()) + ")"
		}
		var instances, nodes []string
		restarts := uint32(0)
		for _, in := range j.GetInstances() {
			restarts += in.GetRestarts()
			if in.GetPhase() == norsk.InstancePhaseStopped {
				continue
			}
			instances = append(instances, in.GetRole()+" "+cmdutil.EnumWord(in.GetPhase()))
			if !slices.Contains(nodes, in.GetNodeId()) {
				nodes = append(nodes, in.GetNodeId())
			}
		}
		var images []string
		for _, s := range job.GetServices() {
			if img := cmdutil.ShortImage(s.GetImage()); img != "" && !slices.Contains(images, img) {
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
			cmdutil.Dash(strings.Join(instances, ", ")), cmdutil.Dash(strings.Join(nodes, ",")), cmdutil.Dash(strings.Join(images, ",")),
			restarts, cmdutil.Ago(now, created), cmdutil.Ago(now, updated), job.GetCurrentHash(), placed, cmdutil.Tags(job.GetTags()), cmdutil.Dash(job.GetDescription()))
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
