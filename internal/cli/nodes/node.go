package nodes

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

// NewNodeCommand is the node group: the machines that run job instances.
func NewNodeCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("node", "List, inspect, tag and terminate nodes")
	cmd.AddCommand(
		cmdutil.Watchable(g, newNodeListCommand(g)),
		newNodeGetCommand(g),
		newNodeTerminateCommand(g),
		newNodeTagCommand(g),
		newNodeIdleExpiryCommand(g),
		newNodeCreateMockCommand(g),
		newNodeCreateAwsCommand(g),
		newNodeCreateOciCommand(g),
		newNodeCreateCHCommand(g),
		newNodeDrainCommand(g),
		newNodePrefetchCommand(g),
	)
	return cmd
}

func newNodeCreateMockCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		n       norsk.MockNode
		tagArgs []string
	)
	c := &cobra.Command{
		Use:   "create-mock [ID]",
		Short: "Create an elastic node on a free host of the Manager's mock provider",
		Long: `Create an elastic node through the Manager's mock provider (providers.mock in
its config.yaml): a free mock host boots a worker that registers as the new
node. The node is starting until its worker calls in, then online; the
empty-node reaper terminates it once it has been idle for its idle expiry.
Without ID the Manager names the node.`,
		Example: `  norsk-ctl node create-mock --pool burst
  norsk-ctl node create-mock edge-1 --tag zone=z1`,
		Args: cmdutil.OptionalArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				n.NodeID = args[0]
			}
			for _, kv := range tagArgs {
				k, v, err := cmdutil.SplitKV("--tag", kv)
				if err != nil {
					return err
				}
				if n.Tags == nil {
					n.Tags = map[string]string{}
				}
				n.Tags[k] = v
			}
			type created struct{ id, host string }
			got, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (created, error) {
				id, host, err := m.CreateMockNode(ctx, n)
				return created{id, host}, err
			}, "create a mock node")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: map[string]string{"nodeId": got.id, "host": got.host}, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Node %s is starting on mock host %s\n", got.id, got.host)
			}})
		},
	}
	c.Flags().StringVar(&n.Pool, "pool", "", "the pool tier the node joins (default: the provider's first pool)")
	c.Flags().StringArrayVar(&tagArgs, "tag", nil, "a tag the node starts with, KEY=VALUE (repeatable)")
	return c
}

func listNodes(g *cmdutil.Globals, cmd *cobra.Command) ([]*norsk.Node, error) {
	m, err := g.Manager(cmd.Context())
	if err != nil {
		return nil, err
	}
	ctx, cancel := g.Call(cmd.Context())
	defer cancel()
	nodes, err := m.ListNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

func newNodeListCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every node the Manager knows, with its state, hardware, load and jobs",
		Args:  cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			nodes, err := listNodes(g, cmd)
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: cmdutil.Messages(nodes), Table: func(w io.Writer) { nodesTable(w, g.Now(), nodes) },
				Wide: func(w io.Writer) { nodesWideTable(w, g.Now(), nodes) }})
		},
	}
}

func nodesTable(w io.Writer, now time.Time, nodes []*norsk.Node) {
	fmt.Fprintln(w, "ID\tNAME\tPROVIDER\tSTATE\tSINCE\tADDRESS\tCPUS\tMEMORY\tLOAD\tJOBS\tIMAGES\tTAGS")
	for _, n := range nodes {
		state := nodeStateWords(n)
		load := "-"
		if l := n.GetLoad(); l != nil {
			load = fmt.Sprintf("%.0f%%", l.GetCpuPercent())
		}
		cpus := "-"
		if v := n.GetHardware().GetVcpus(); v > 0 {
			cpus = fmt.Sprint(v)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.GetNodeId(), cmdutil.Dash(n.GetNodeName()), cmdutil.Dash(n.GetProvider()),
			state, cmdutil.Ago(now, n.GetStateSince()), cmdutil.Dash(n.GetAddress()), cpus, cmdutil.BytesIEC(n.GetHardware().GetMemoryBytes()),
			load, len(n.GetInstances()), heldSummary(n.GetHeldImages()), cmdutil.Tags(n.GetTags()))
	}
}

func newNodeGetCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "get ID",
		Aliases:           []string{"show"},
		Short:             "Show one node",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteNodeIDs,
		Annotations:       cmdutil.TakesIDs("node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			nodes, err := listNodes(g, cmd)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if n.GetNodeId() == args[0] {
					return g.Printer().Print(cmdutil.Result{Data: n, Table: func(w io.Writer) { nodeTable(w, g.Now(), n) }})
				}
			}
			return fmt.Errorf("node %s: %w", args[0], norsk.ErrNotFound)
		},
	}
}

func nodeTable(w io.Writer, now time.Time, n *norsk.Node) {
	fmt.Fprintf(w, "Node:\t%s\n", n.GetNodeId())
	fmt.Fprintf(w, "Name:\t%s\n", cmdutil.Dash(n.GetNodeName()))
	if pi := n.GetProviderInstance(); pi != "" {
		fmt.Fprintf(w, "Provider:\t%s (%s)\n", cmdutil.Dash(n.GetProvider()), pi)
	} else {
		fmt.Fprintf(w, "Provider:\t%s\n", cmdutil.Dash(n.GetProvider()))
	}
	state := cmdutil.EnumWord(n.GetState()) + " since " + cmdutil.Ago(now, n.GetStateSince())
	if n.GetStateReason() != "" {
		state += ": " + n.GetStateReason()
	}
	fmt.Fprintf(w, "State:\t%s\n", state)
	nodeDrainLines(w, now, n)
	fmt.Fprintf(w, "Connected:\t%v", n.GetConnected())
	if n.GetLastSeen() != nil {
		fmt.Fprintf(w, " (last seen %s)", cmdutil.Ago(now, n.GetLastSeen()))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Address:\t%s\n", cmdutil.Dash(n.GetAddress()))
	fmt.Fprintf(w, "Tags:\t%s\n", cmdutil.Tags(n.GetTags()))
	if hw := n.GetHardware(); hw != nil {
		fmt.Fprintf(w, "Hardware:\t%d vCPUs, %s memory", hw.GetVcpus(), cmdutil.BytesIEC(hw.GetMemoryBytes()))
		if hw.GetArchitecture() != norsk.ArchitectureUnspecified {
			fmt.Fprintf(w, ", %s", cmdutil.EnumWord(hw.GetArchitecture()))
		}
		if hw.GetHostname() != "" {
			fmt.Fprintf(w, ", host %s", hw.GetHostname())
		}
		fmt.Fprintln(w)
		for _, gpu := range hw.GetGpus() {
			fmt.Fprintf(w, "GPU:\t%s (capacity %g)\n", gpu.GetModel(), gpu.GetCapacity())
		}
	}
	if caps := n.GetCapabilities(); len(caps) > 0 {
		var cs []string
		for _, c := range caps {
			cs = append(cs, fmt.Sprintf("%s×%d", c.GetName(), c.GetCount()))
		}
		fmt.Fprintf(w, "Capabilities:\t%s\n", strings.Join(cs, ", "))
	}
	fmt.Fprintf(w, "Runtime:\t%s (worker %s)\n", cmdutil.Dash(n.GetRuntime()), cmdutil.Dash(n.GetWorkerVersion()))
	if l := n.GetLoad(); l != nil {
		fmt.Fprintf(w, "Load:\tCPU %.0f%%, memory %s, %d instances (%s)\n", l.GetCpuPercent(), cmdutil.BytesIEC(l.GetMemoryUsedBytes()), l.GetInstances(), cmdutil.Ago(now, l.GetMeasuredAt()))
	}
	fmt.Fprintf(w, "Idle expiry:\t%s\n", cmdutil.DurationMs(n.GetIdleExpiryMs()))
	fmt.Fprintf(w, "Registered:\t%s (%s)\n", cmdutil.Timestamp(n.GetRegisteredAt()), cmdutil.Ago(now, n.GetRegisteredAt()))
	if ins := n.GetInstances(); len(ins) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "JOB\tROLE\tTOKEN")
		for _, in := range ins {
			fmt.Fprintf(w, "%s\t%s\t%d\n", in.GetJobId(), in.GetRole(), in.GetFencingToken())
		}
	}
	if imgs := n.GetHeldImages(); len(imgs) > 0 {
		heldImagesTable(w, now, imgs)
	} else if n.GetRuntime() == "docker" {
		fmt.Fprintf(w, "Images:\tnone held\n")
	}
}

func newNodeTerminateCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:               "terminate ID",
		Short:             "Forcibly stop a node: its instances are stopped and its provider releases it",
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteNodeIDs,
		Annotations:       cmdutil.TakesIDs("node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			if err := m.TerminateNode(ctx, args[0]); err != nil {
				return fmt.Errorf("terminate node %s: %w", args[0], err)
			}
			return g.PrintDone("node", args[0], "terminated")
		},
	}
}

func newNodeTagCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tag ID KEY=VALUE [KEY=VALUE…]",
		Short: "Merge tags onto a node (KEY= sets an empty value); other tags are kept",
		Example: `  norsk-ctl node tag node-1 az=eu-west-1a rack=r12
  norsk-ctl node tag node-1 spare=true   # a hot spare (local servers only)`,
		Args:              cmdutil.MinArgs("ID", "KEY=VALUE"),
		ValidArgsFunction: g.CompleteNodeIDs,
		Annotations:       cmdutil.TakesIDs("node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			set := map[string]string{}
			for _, kv := range args[1:] {
				k, v, err := cmdutil.SplitKV("tag", kv)
				if err != nil {
					return err
				}
				set[k] = v
			}
			n, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.Node, error) {
				return m.SetNodeTags(ctx, args[0], set)
			}, "tag node %s", args[0])
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: n, Table: func(w io.Writer) {
				fmt.Fprintf(w, "Node %s tags: %s\n", n.GetNodeId(), cmdutil.Tags(n.GetTags()))
			}})
		},
	}
}

func newNodeIdleExpiryCommand(g *cmdutil.Globals) *cobra.Command {
	var set string
	cmd := &cobra.Command{
		Use:   "idle-expiry ID [--set DURATION|0]",
		Short: "Show or set a node's own idle expiry (how long the reaper leaves it empty)",
		Long: `Without --set, show the node's idle-expiry override and the expiry in force.
--set DURATION (e.g. 30m, 2h, 1d) gives the node its own grace before the
empty-node reaper terminates it; --set 0 clears it (the daemon-wide value then
applies). The setting survives a Manager restart.`,
		Args:              cmdutil.ExactArgs("ID"),
		ValidArgsFunction: g.CompleteNodeIDs,
		Annotations:       cmdutil.TakesIDs("node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var d time.Duration
			if cmd.Flags().Changed("set") {
				var err error
				if d, err = cmdutil.ParseDuration(set); err != nil || (d > 0 && d < time.Millisecond) {
					return cmdutil.UsageErrorf("--set %q: want a duration such as 30m, 2h or 1d, or 0", set)
				}
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := g.Call(cmd.Context())
			defer cancel()
			var ie *norsk.NodeIdleExpiry
			if cmd.Flags().Changed("set") {
				ie, err = m.SetNodeIdleExpiry(ctx, args[0], d)
			} else {
				ie, err = m.GetNodeIdleExpiry(ctx, args[0])
			}
			if err != nil {
				return fmt.Errorf("idle expiry of node %s: %w", args[0], err)
			}
			return g.Printer().Print(cmdutil.Result{Data: ie, Table: func(w io.Writer) { idleExpiryTable(w, ie) }})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "the node's idle expiry (0 clears the override)")
	return cmd
}

func idleExpiryTable(w io.Writer, ie *norsk.NodeIdleExpiry) {
	fmt.Fprintf(w, "Node:\t%s\n", ie.GetNodeId())
	if ie.GetIdleExpiryMs() == 0 {
		fmt.Fprintf(w, "Override:\tnone\n")
		fmt.Fprintf(w, "In force:\t%s (the daemon-wide value)\n", cmdutil.DurationMs(ie.GetEffectiveIdleExpiryMs()))
		return
	}
	fmt.Fprintf(w, "Override:\t%s\n", cmdutil.DurationMs(ie.GetIdleExpiryMs()))
	fmt.Fprintf(w, "In force:\t%s\n", cmdutil.DurationMs(ie.GetEffectiveIdleExpiryMs()))
}
