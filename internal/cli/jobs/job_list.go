package jobs

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// jobListFlags are the filters of job list.
type jobListFlags struct {
	tagEq, tagNeq, tagRe []string
	tagExists, tagAbsent []string
	ids, idNeq, idRe     []string
	createdAfter, createdBefore,
	updatedAfter, updatedBefore,
	startAfter, startBefore string
	limit   uint32
	after   string
	history bool
	// state and node filter the answer here (the seed's jobSearch has no
	// such filter).
	state, node string
}

// keep reports whether a job passes --state and --node: state is the
// job's own state (pre, active, post) or a live instance's phase
// (running, failed, …); node holds one of its live instances.
func (f *jobListFlags) keep(j *norsk.JobWithHistory) bool {
	stateOK := f.state == "" || cmdutil.EnumWord(j.GetJob().GetState()) == f.state
	nodeOK := f.node == ""
	for _, in := range j.GetInstances() {
		if in.GetPhase() == norsk.InstancePhaseStopped {
			continue
		}
		onNode := f.node == "" || in.GetNodeId() == f.node
		nodeOK = nodeOK || onNode
		if onNode && cmdutil.EnumWord(in.GetPhase()) == f.state {
			stateOK = true
		}
	}
	return stateOK && nodeOK
}

func newJobListCommand(g *cmdutil.Globals) *cobra.Command {
	var f jobListFlags
	cmd := &cobra.Command{
		Use:   "list [filters]",
		Short: "List jobs, filtered by tags, ids and dates (every filter must match)",
		Long: `List jobs in id order. Every filter given must match. Dates are RFC 3339
(2025-03-01T12:00:00Z), a day (2025-03-01, UTC) or a duration meaning that long
ago (90m, 1h, 2d).`,
		Example: `  norsk-ctl job list --tag channel=news --tag-absent retired
  norsk-ctl job list --state running --node dev-worker-2 -o name
  norsk-ctl job list --id-re 'news-[0-9]+' --created-after 2d -o json`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := f.settings(g.Now())
			if err != nil {
				return err
			}
			// -o wide shows each job's age, from its history.
			settings.IncludeHistory = settings.IncludeHistory || g.Output == "wide"
			jobs, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]*norsk.JobWithHistory, error) {
				return m.JobSearch(ctx, settings)
			}, "list jobs")
			if err != nil {
				return err
			}
			if f.state != "" || f.node != "" {
				kept := jobs[:0]
				for _, j := range jobs {
					if f.keep(j) {
						kept = append(kept, j)
					}
				}
				jobs = kept
			}
			return g.Printer().Print(cmdutil.Result{Data: cmdutil.Messages(jobs), Table: func(w io.Writer) { jobsTable(w, jobs) },
				Wide: func(w io.Writer) { jobsWideTable(w, g.Now(), jobs) }})
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.tagEq, "tag", nil, "tag KEY=VALUE: the tag has this value (repeatable)")
	fl.StringArrayVar(&f.tagNeq, "tag-neq", nil, "tag KEY=VALUE: the tag is absent or has another value")
	fl.StringArrayVar(&f.tagRe, "tag-re", nil, "tag KEY=REGEX: the tag's whole value matches the RE2 expression")
	fl.StringArrayVar(&f.tagExists, "tag-exists", nil, "the tag KEY is present")
	fl.StringArrayVar(&f.tagAbsent, "tag-absent", nil, "the tag KEY is absent")
	fl.StringArrayVar(&f.ids, "id", nil, "the job id is ID")
	fl.StringArrayVar(&f.idNeq, "id-neq", nil, "the job id is not ID")
	fl.StringArrayVar(&f.idRe, "id-re", nil, "the whole job id matches the RE2 expression")
	fl.StringVar(&f.createdAfter, "created-after", "", "created after this time")
	fl.StringVar(&f.createdBefore, "created-before", "", "created before this time")
	fl.StringVar(&f.updatedAfter, "updated-after", "", "spec last changed after this time")
	fl.StringVar(&f.updatedBefore, "updated-before", "", "spec last changed before this time")
	fl.StringVar(&f.startAfter, "start-after", "", "startDateTime after this time")
	fl.StringVar(&f.startBefore, "start-before", "", "startDateTime before this time")
	fl.Uint32Var(&f.limit, "limit", 0, "at most this many jobs (0 = all)")
	fl.StringVar(&f.after, "after-id", "", "only jobs whose id sorts after this one (paging)")
	fl.BoolVar(&f.history, "history", false, "include each job's history (json and yaml output)")
	fl.StringVar(&f.state, "state", "", "the job's state (pre, active, post) or a live instance's phase (running, failed, …)")
	fl.StringVar(&f.node, "node", "", "a live instance of the job is on this node (id)")
	return cmd
}

// settings turns the flags into search settings; bad values are usage
// errors.
func (f *jobListFlags) settings(now time.Time) (norsk.JobSearchSettings, error) {
	s := norsk.JobSearchSettings{Limit: f.limit, AfterJobID: f.after, IncludeHistory: f.history}
	pairs := []struct {
		flag   string
		values []string
		filter func(k, v string) *norsk.JobFilter
	}{
		{"--tag", f.tagEq, norsk.TagEq},
		{"--tag-neq", f.tagNeq, norsk.TagNeq},
		{"--tag-re", f.tagRe, norsk.TagRegex},
	}
	for _, p := range pairs {
		for _, kv := range p.values {
			k, v, err := cmdutil.SplitKV(p.flag, kv)
			if err != nil {
				return s, err
			}
			s.Filters = append(s.Filters, p.filter(k, v))
		}
	}
	for _, k := range f.tagExists {
		s.Filters = append(s.Filters, norsk.TagExists(k))
	}
	for _, k := range f.tagAbsent {
		s.Filters = append(s.Filters, norsk.TagAbsent(k))
	}
	for _, id := range f.ids {
		s.Filters = append(s.Filters, norsk.IdEq(id))
	}
	for _, id := range f.idNeq {
		s.Filters = append(s.Filters, norsk.IdNeq(id))
	}
	for _, re := range f.idRe {
		s.Filters = append(s.Filters, norsk.IdRegex(re))
	}
	dates := []struct {
		flag   string
		value  string
		field  norsk.DateField
		filter func(norsk.DateField, time.Time) *norsk.JobFilter
	}{
		{"--created-after", f.createdAfter, norsk.DateFieldCreated, norsk.DateAfter},
		{"--created-before", f.createdBefore, norsk.DateFieldCreated, norsk.DateBefore},
		{"--updated-after", f.updatedAfter, norsk.DateFieldUpdated, norsk.DateAfter},
		{"--updated-before", f.updatedBefore, norsk.DateFieldUpdated, norsk.DateBefore},
		{"--start-after", f.startAfter, norsk.DateFieldStart, norsk.DateAfter},
		{"--start-before", f.startBefore, norsk.DateFieldStart, norsk.DateBefore},
	}
	for _, d := range dates {
		if d.value == "" {
			continue
		}
		t, err := cmdutil.ParseWhen(d.value, now)
		if err != nil {
			return s, cmdutil.UsageErrorf("%s: %v", d.flag, err)
		}
		s.Filters = append(s.Filters, d.filter(d.field, t))
	}
	return s, nil
}

// jobsTable writes one row per job.
func jobsTable(w io.Writer, jobs []*norsk.JobWithHistory) {
	fmt.Fprintln(w, "ID\tSTATE\tINSTANCES\tSERVICES\tTAGS\tDESCRIPTION")
	for _, j := range jobs {
		job := j.GetJob()
		state := cmdutil.EnumWord(job.GetState())
		if t := job.GetTerminalState(); t != nil {
			state += " (" + cmdutil.EnumWord(t.GetKind()) + ")"
		}
		var instances []string
		for _, in := range j.GetInstances() {
			if in.GetPhase() == norsk.InstancePhaseStopped {
				continue
			}
			instances = append(instances, cmdutil.InstanceWhere(in.GetRole(), in.GetNodeId())+" "+cmdutil.EnumWord(in.GetPhase()))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", job.GetJobId(), state, cmdutil.Dash(strings.Join(instances, ", ")),
			len(job.GetServices()), cmdutil.Tags(job.GetTags()), cmdutil.Dash(job.GetDescription()))
	}
}
