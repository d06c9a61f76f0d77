package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewJobCommand is the job group: specs, instances and history.
func NewJobCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("job", "Create, start, stop and inspect jobs")
	cmd.AddCommand(
		newJobCreateCommand(g),
		newJobUpdateCommand(g),
		newJobGetCommand(g),
		newJobHistoryCommand(g),
		newJobWhyCommand(g),
		cmdutil.Watchable(g, newJobListCommand(g)),
		newJobDeleteCommand(g),
		newJobStartCommand(g),
		newJobStopCommand(g),
		newJobStartPreparedCommand(g),
		newJobCompleteCommand(g),
		newJobFailCommand(g),
	)
	return cmd
}

// readSpec reads the file name ("-" = stdin).
func readSpec(g *cmdutil.Globals, name string) ([]byte, error) {
	if name == "" {
		return nil, cmdutil.UsageErrorf("give the job spec with -f FILE (- for stdin)")
	}
	if name == "-" {
		data, err := io.ReadAll(g.In)
		if err != nil {
			return nil, fmt.Errorf("read the job spec from stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read the job spec: %w", err)
	}
	return data, nil
}

// Created is what job create prints for each job.
type Created struct {
	JobID string `json:"jobId"`
	Hash  string `json:"hash"` // a decimal string, as protojson writes uint64
}

func newJobCreateCommand(g *cmdutil.Globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create jobs from a YAML or JSON spec (several YAML documents create several jobs)",
		Long: `Create the job (or jobs) of a spec file, YAML or JSON, with the API's field
names (jobId or job_id) and enum values in full (RESTART_MODE_ON_FAILURE) or
short (on-failure). Prints each job's id and hash, the revision "job update"
must present (-o json: {"jobId", "hash"}, an array of them for several jobs).
Jobs are created in order; the first failure stops the command.`,
		Example: `  norsk-ctl job create -f news.yaml
  cat news.json | norsk-ctl job create -f -`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readSpec(g, file)
			if err != nil {
				return err
			}
			jobs, err := norsk.DecodeJobSpecs(data)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			var out []Created
			for _, job := range jobs {
				ctx, cancel := g.Call(cmd.Context())
				hash, err := m.CreateJob(ctx, job)
				cancel()
				if err != nil {
					if len(out) > 0 {
						printCreated(g, out)
					}
					return fmt.Errorf("create job %s: %w", job.GetJobId(), err)
				}
				out = append(out, Created{JobID: job.GetJobId(), Hash: strconv.FormatUint(hash, 10)})
			}
			return printCreated(g, out)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the job spec (- for stdin)")
	return cmd
}

func printCreated(g *cmdutil.Globals, out []Created) error {
	var data any = out
	if len(out) == 1 {
		data = out[0]
	}
	return g.Printer().Print(cmdutil.Result{Data: data, Table: func(w io.Writer) {
		fmt.Fprintln(w, "JOB\tHASH")
		for _, c := range out {
			fmt.Fprintf(w, "%s\t%s\n", c.JobID, c.Hash)
		}
	}})
}

func newJobUpdateCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		file   string
		hash   uint64
		latest bool
	)
	cmd := &cobra.Command{
		Use:   "update -f FILE [--hash N | --latest]",
		Short: "Replace a job's spec (optimistic concurrency: the hash read must still be current)",
		Long: `Replace the spec of the job the file names. The Manager applies it only if the
job is still at the hash the caller read: the spec's currentHash, or --hash N.
--latest reads the job's current hash first and uses it, overwriting whatever
changed since. Running instances keep the spec they started with.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("hash") && latest {
				return cmdutil.UsageErrorf("--hash and --latest exclude each other")
			}
			data, err := readSpec(g, file)
			if err != nil {
				return err
			}
			job, err := norsk.DecodeJobSpec(data)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if job.GetJobId() == "" {
				return fmt.Errorf("%s: the spec has no jobId", file)
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			switch {
			case cmd.Flags().Changed("hash"):
				job.CurrentHash = hash
			case latest:
				ctx, cancel := g.Call(cmd.Context())
				cur, err := m.JobById(ctx, job.GetJobId())
				cancel()
				if err != nil {
					return fmt.Errorf("read the current hash of job %s: %w", job.GetJobId(), err)
				}
				job.CurrentHash = cur.GetJob().GetCurrentHash()
				fmt.Fprintf(g.ErrOut, "Using the current hash %d of job %s (--latest).\n", job.CurrentHash, job.GetJobId())
			case job.GetCurrentHash() == 0:
				return cmdutil.UsageErrorf("the spec has no currentHash: pass --hash N (the hash you read) or --latest")
			}
			prev := job.CurrentHash
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			next, err := m.UpdateJob(ctx, job)
			if err != nil {
				if errors.Is(err, norsk.ErrFailedPrecondition) && !latest {
					return fmt.Errorf("update job %s: %w (read the job again, or use --latest to overwrite)", job.GetJobId(), err)
				}
				return fmt.Errorf("update job %s: %w", job.GetJobId(), err)
			}
			c := Created{JobID: job.GetJobId(), Hash: strconv.FormatUint(next, 10)}
			return g.Printer().Print(cmdutil.Result{Data: c, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Job %s updated: hash %d → %d\n", c.JobID, prev, next)
			}})
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the job spec (- for stdin)")
	cmd.Flags().Uint64Var(&hash, "hash", 0, "the hash the update is based on (overrides the spec's currentHash)")
	cmd.Flags().BoolVar(&latest, "latest", false, "base the update on the job's current hash, whatever it is")
	return cmd
}

func newJobGetCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "get ID",
		Aliases:           []string{"show"},
		Short:             "Show a job: spec, state, instances and recent history",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.TakesIDs("job"),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := jobByID(g, cmd, args[0])
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: j, Table: func(w io.Writer) { jobTable(g, w, j) }})
		},
	}
}

// jobByID fetches one job.
func jobByID(g *cmdutil.Globals, cmd *cobra.Command, id string) (*norsk.JobWithHistory, error) {
	m, err := g.Manager(cmd.Context())
	if err != nil {
		return nil, err
	}
	ctx, cancel := g.Call(cmd.Context())
	defer cancel()
	j, err := m.JobById(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	return j, nil
}

// jobTable writes the human view of one job.
func jobTable(g *cmdutil.Globals, w io.Writer, j *norsk.JobWithHistory) {
	job, now := j.GetJob(), g.Now()
	fmt.Fprintf(w, "Job:\t%s\n", job.GetJobId())
	if job.GetDescription() != "" {
		fmt.Fprintf(w, "Description:\t%s\n", job.GetDescription())
	}
	fmt.Fprintf(w, "State:\t%s\n", cmdutil.EnumWord(job.GetState()))
	if t := job.GetTerminalState(); t != nil {
		fmt.Fprintf(w, "Terminal:\t%s", cmdutil.EnumWord(t.GetKind()))
		if t.GetReason() != "" {
			fmt.Fprintf(w, ": %s", t.GetReason())
		}
		fmt.Fprintf(w, " (%s)\n", cmdutil.Ago(now, t.GetAt()))
	}
	fmt.Fprintf(w, "Hash:\t%d\n", job.GetCurrentHash())
	fmt.Fprintf(w, "Tags:\t%s\n", cmdutil.Tags(job.GetTags()))
	if job.GetStartDateTime() != nil {
		fmt.Fprintf(w, "Start:\t%s (%s)\n", cmdutil.Timestamp(job.GetStartDateTime()), cmdutil.Ago(now, job.GetStartDateTime()))
	}
	if len(job.GetVolumes()) > 0 {
		fmt.Fprintf(w, "Volumes:\t%s\n", strings.Join(job.GetVolumes(), ", "))
	}
	if r := job.GetAutoPlacement().GetRequirements(); job.GetAutoPlacement() != nil {
		fmt.Fprintf(w, "Placement:\tautomatic, capacity %g", r.GetRequiredCapacity())
		if r.RequiredCores != nil {
			fmt.Fprintf(w, ", %d cores", r.GetRequiredCores())
		}
		if r.GetPriorityBand() != "" {
			fmt.Fprintf(w, ", band %s", r.GetPriorityBand())
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "SERVICE\tIMAGE\tPORTS\tRESTART")
	for _, s := range job.GetServices() {
		var ports []string
		for _, p := range s.GetPorts() {
			ports = append(ports, cmdutil.SpecPort(p))
		}
		image := s.GetImage()
		if image == "" && len(s.GetCommand()) > 0 {
			image = strings.Join(s.GetCommand(), " ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.GetName(), cmdutil.Dash(image), cmdutil.Dash(strings.Join(ports, ", ")), cmdutil.RestartPolicy(s.GetRestart()))
	}
	if len(j.GetInstances()) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "ROLE\tNODE\tPHASE\tDESIRED\tTOKEN\tBOUND\tPORTS")
		for _, in := range j.GetInstances() {
			phase := cmdutil.EnumWord(in.GetPhase())
			if in.GetPhase() == norsk.InstancePhaseStopped && in.GetStopReason() != norsk.StoppingReasonNodeStopped || in.GetStopAdditionalReason() != "" {
				phase += " (" + cmdutil.StoppingReason(&norsk.InstanceStopping{Reason: in.GetStopReason(), AdditionalReason: in.GetStopAdditionalReason()}) + ")"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", in.GetRole(), in.GetNodeId(), phase, cmdutil.EnumWord(in.GetDesired()),
				in.GetFencingToken(), cmdutil.Ago(now, in.GetBoundAt()), cmdutil.ResolvedPorts(in.GetServicePortMappings()))
		}
	}
	if h := j.GetHistory(); len(h) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "RECENT HISTORY")
		historyTable(w, now, h[:min(len(h), 5)])
	}
}

// historyTable writes history entries, in the order given (newest first).
func historyTable(w io.Writer, now time.Time, entries []*norsk.JobHistoryEntry) {
	fmt.Fprintln(w, "TIME	INDEX	EVENT	ROLE	NODE	DETAILS")
	for _, e := range entries {
		role, node := "-", "-"
		if ref := cmdutil.HistoryInstance(e); ref != nil {
			role, node = cmdutil.Dash(ref.GetRole()), cmdutil.Dash(ref.GetNodeId())
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", cmdutil.Ago(now, e.GetTimestamp()), e.GetIndex(), cmdutil.HistoryEvent(e), role, node, cmdutil.HistoryDetails(e))
	}
}

func newJobHistoryCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "history ID",
		Short:             "Show a job's history, newest first: time, event, role, node and details",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.TakesIDs("job"),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := jobByID(g, cmd, args[0])
			if err != nil {
				return err
			}
			h := j.GetHistory()
			return g.Printer().Print(cmdutil.Result{Data: cmdutil.Messages(h), Table: func(w io.Writer) { historyTable(w, g.Now(), h) }})
		},
	}
}

func newJobDeleteCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "delete ID",
		Short:             "Delete a job; its running instances are stopped first",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.TakesIDs("job"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return jobAction(g, cmd, args[0], "deleted", func(m *norsk.Manager, ctx context.Context) error {
				return m.DeleteJob(ctx, args[0])
			})
		},
	}
}

func newJobCompleteCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "complete ID",
		Short:             "Complete a job: stop its instances; it is never started again",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.TakesIDs("job"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return jobAction(g, cmd, args[0], "completed", func(m *norsk.Manager, ctx context.Context) error {
				return m.CompleteJob(ctx, args[0])
			})
		},
	}
}

func newJobFailCommand(g *cmdutil.Globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:               "fail ID --reason TEXT",
		Short:             "Mark a job terminally failed, so that it is never placed again",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.TakesIDs("job"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return cmdutil.UsageErrorf("--reason is required")
			}
			return jobAction(g, cmd, args[0], "marked failed", func(m *norsk.Manager, ctx context.Context) error {
				return m.MarkJobFailed(ctx, args[0], reason)
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the job failed (recorded in its terminal state)")
	return cmd
}

// jobAction runs one call about job id and reports it.
func jobAction(g *cmdutil.Globals, cmd *cobra.Command, id, what string, call func(*norsk.Manager, context.Context) error) error {
	m, err := g.Manager(cmd.Context())
	if err != nil {
		return err
	}
	ctx, cancel := g.Call(cmd.Context())
	defer cancel()
	if err := call(m, ctx); err != nil {
		return fmt.Errorf("%s job %s: %w", strings.Fields(cmd.Use)[0], id, err)
	}
	return g.PrintDone("job", id, what)
}

func newJobWhyCommand(g *cmdutil.Globals) *cobra.Command {
	var role, pool string
	cmd := &cobra.Command{
		Use:   "why ID [--role ROLE] [--pool POOL]",
		Short: "Explain where a job's instance would be placed now, and why every other node would not take it",
		Long: `Evaluate the job's autoPlacement requirements against every node and the
instances already bound, as automatic placement does, and print the node it
would go to and, for every other node, the rules that refuse it (capacity,
cores, GPU, capabilities, pool, the node's runtime, exclusions such as a node that is not online,
anti-affinity, co-location). Nothing is bound.`,
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteJobIDs,
		Annotations:       cmdutil.TakesIDs("job"),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.ExplainPlacementResponse, error) {
				return m.ExplainPlacement(ctx, args[0], role, pool)
			}, "explain the placement of %s", args[0])
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: res, Table: func(w io.Writer) { placementTable(w, args[0], res) }})
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "the instance's role (default primary)")
	cmd.Flags().StringVar(&pool, "pool", "", "the pool whose tiers are tried (default: every node)")
	return cmd
}

// placementTable prints an explanation: the verdict, then one line per node.
func placementTable(w io.Writer, jobID string, res *norsk.ExplainPlacementResponse) {
	if res.GetNodeId() != "" {
		fmt.Fprintf(w, "Job %s would be placed on %s.\n", jobID, res.GetNodeId())
	} else {
		fmt.Fprintf(w, "Job %s cannot be placed now: no node passes every rule.\n", jobID)
	}
	fmt.Fprintf(w, "%s\n", res.GetSummary())
	for _, d := range res.GetDegradations() {
		fmt.Fprintf(w, "degraded: %s: %s\n", d.GetRule(), d.GetReason())
	}
	fmt.Fprintln(w, "\nNODE\tVERDICT\tWHY")
	for _, v := range res.GetNodes() {
		verdict := "eligible"
		switch {
		case v.GetChosen():
			verdict = "chosen"
		case len(v.GetRefusals()) > 0:
			verdict = "refused"
		}
		var why []string
		for _, r := range v.GetRefusals() {
			why = append(why, r.GetRule()+": "+r.GetReason())
		}
		why = append(why, v.GetNotes()...)
		fmt.Fprintf(w, "%s\t%s\t%s\n", v.GetNodeId(), verdict, strings.Join(why, "; "))
	}
}
