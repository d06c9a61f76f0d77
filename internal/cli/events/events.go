package events

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewEventsCommand is "events": the Manager's event stream, optionally
// filtered, from an index or the live end.
func NewEventsCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		after      uint64
		noSnapshot bool
		filter     eventFilter
	)
	cmd := &cobra.Command{
		Use:   "events [--after N] [--no-snapshot]",
		Short: "Follow the Manager's event stream until interrupted",
		Long: `Print the Manager's events as they happen, one line each: store index, time,
kind and subject. Without --after the stream starts with a snapshot of every
job and node, ended by initial_data_complete; --no-snapshot starts with live
events, --after N with every event after index N. The stream resumes by
itself after a disconnect, missing nothing. With -o json each event is one
JSON object on its own line.

--kind (repeatable: job_created or jobCreated), --job, --node and --bundle
have the Manager send only the events of those kinds that concern that job,
node or bundle (a job's events concern its instances' nodes; a bundle's,
its jobs).`,
		Example: `  norsk-ctl events --no-snapshot --kind node_lost --kind node_online
  norsk-ctl events --job news.channel.0 -o json`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if noSnapshot && after > 0 {
				return cmdutil.UsageErrorf("--no-snapshot applies only without --after")
			}
			m, err := g.Manager(cmd.Context())
			if err != nil {
				return err
			}
			settings := norsk.EventStreamSettings{AfterIndex: after, SkipSnapshot: noSnapshot}
			if err := filter.apply(&settings); err != nil {
				return err
			}
			s := m.EventStream(cmd.Context(), settings)
			defer s.Close()
			p := g.Printer()
			if _, table := p.(*cmdutil.TablePrinter); table {
				fmt.Fprintf(g.Out, "%-8s %-24s  %-26s %s\n", "INDEX", "TIME", "KIND", "SUBJECT")
			}
			for s.Next() {
				if err := p.Event(s.Event()); err != nil {
					return fmt.Errorf("print event: %w", err)
				}
			}
			err = s.Err()
			if errors.Is(err, norsk.ErrCanceled) && cmd.Context().Err() != nil {
				return nil // interrupted: the normal end
			}
			if err != nil {
				return fmt.Errorf("event stream: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "start with the events after this store index")
	cmd.Flags().BoolVar(&noSnapshot, "no-snapshot", false, "start with live events, without the snapshot")
	cmd.Flags().StringArrayVar(&filter.kinds, "kind", nil, "only events of this kind (repeatable)")
	cmd.Flags().StringVar(&filter.job, "job", "", "only events that name this job")
	cmd.Flags().StringVar(&filter.node, "node", "", "only events that name this node")
	cmd.Flags().StringVar(&filter.bundle, "bundle", "", "only events that name this bundle")
	return cmd
}
