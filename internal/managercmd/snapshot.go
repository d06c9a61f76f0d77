package managercmd

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/manager"
)

func newSnapshotCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "snapshot",
		Short: "Operator snapshots of a member's store",
	}
	c.AddCommand(newSnapshotRestoreCommand())
	return c
}

func newSnapshotRestoreCommand() *cobra.Command {
	var (
		cfg  manager.Config
		logs logFlags
	)
	c := &cobra.Command{
		Use:   "restore <file>",
		Short: "Restore a snapshot file into a stopped (or new) member's data directory",
		Long: `Restore a snapshot file (from 'norsk-ctl operator snapshot save', or a backup
in <data-dir>/backups) into the data directory of a member that is not
running: its whole state becomes the snapshot's. The file is verified in full
first; a damaged one is refused and changes nothing. Start the member
afterwards; it migrates an older snapshot's schema at start, after a backup.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			if cfg.DataDir == "" {
				return usageError{fmt.Errorf("--data-dir is required")}
			}
			cfg.Logger = log
			start := time.Now()
			h, err := manager.RestoreOffline(cmd.Context(), cfg, args[0])
			if err != nil {
				return err
			}
			fmt.Printf("restored %s into %s: index %d, schema version %d (%s)\n", args[0], cfg.DataDir, h.GetIndex(), h.GetSchemaVersion(), time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().StringVar(&cfg.DataDir, "data-dir", "", "the stopped member's data directory (created if new)")
	c.Flags().StringVar(&cfg.NodeName, "node-name", "", "the member's name, for a new data directory (default: the hostname)")
	logs.register(c)
	return c
}
