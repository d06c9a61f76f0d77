package cmdutil

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// completeFrom completes a command's argument from what list asks the
// Manager ("id\tdescription" each); a Manager that does not answer
// completes nothing (and never files).
func completeFrom(g *Globals, cmd *cobra.Command, list func(context.Context, *norsk.Manager) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	m, err := g.Manager(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := g.Call(cmd.Context())
	defer cancel()
	ids, err := list(ctx, m)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// CompleteMigrationIDs completes a migration id: every migration the
// Manager holds, with its job and phase.
func (g *Globals) CompleteMigrationIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeFrom(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]string, error) {
		all, err := m.ListMigrations(ctx, "")
		ids := make([]string, 0, len(all))
		for _, st := range all {
			ids = append(ids, st.GetMigrationId()+"\t"+st.GetSourceJobId()+" "+norsk.PhaseName(st.GetPhase()))
		}
		return ids, err
	})
}

// CompleteEnum registers fixed completions for an enum-valued flag.
func CompleteEnum(cmd *cobra.Command, flag string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// CompleteJobIDs offers the ids of the Manager's jobs.
func (g *Globals) CompleteJobIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeFrom(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]string, error) {
		jobs, err := m.JobSearch(ctx, norsk.JobSearchSettings{})
		ids := make([]string, 0, len(jobs))
		for _, j := range jobs {
			ids = append(ids, j.GetJob().GetJobId()+"\t"+EnumWord(j.GetJob().GetState()))
		}
		return ids, err
	})
}

// CompleteNodeIDs offers the ids of the Manager's nodes.
func (g *Globals) CompleteNodeIDs(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	return completeFrom(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]string, error) {
		nodes, err := m.ListNodes(ctx)
		ids := make([]string, 0, len(nodes))
		for _, n := range nodes {
			ids = append(ids, n.GetNodeId()+"\t"+strings.TrimSpace(n.GetNodeName()+" "+EnumWord(n.GetState())))
		}
		return ids, err
	})
}

// CompleteBundleIDs offers the ids of the Manager's bundles (first argument
// only).
func (g *Globals) CompleteBundleIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeFrom(g, cmd, func(ctx context.Context, m *norsk.Manager) ([]string, error) {
		list, err := m.ListBundles(ctx)
		ids := make([]string, 0, len(list))
		for _, bw := range list {
			ids = append(ids, bw.GetBundle().GetBundleId()+"\t"+EnumWord(bw.GetBundle().GetState()))
		}
		return ids, err
	})
}

// CompleteSlotIDs offers the ids of the cluster slots.
func (g *Globals) CompleteSlotIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	m, err := g.Manager(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := g.Call(cmd.Context())
	defer cancel()
	slots, err := m.ListClusterNodes(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var ids []string
	for _, s := range slots {
		ids = append(ids, s.GetNodeId()+"\t"+s.GetNodeName())
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}
