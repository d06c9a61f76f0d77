package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// completeFrom completes a command's argument from what list asks the
// Manager ("id\tdescription" each); a Manager that does not answer
// completes nothing (and never files).
func completeFrom(g *globals, cmd *cobra.Command, list func(context.Context, *norsk.Manager) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	m, err := g.manager(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := g.call(cmd.Context())
	defer cancel()
	ids, err := list(ctx, m)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// completeMigrationIDs completes a migration id: every migration the
// Manager holds, with its job and phase.
func (g *globals) completeMigrationIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
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

// completeEnum registers fixed completions for an enum-valued flag.
func completeEnum(cmd *cobra.Command, flag string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}
