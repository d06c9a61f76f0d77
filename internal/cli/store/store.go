package store

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// NewStoreCommand is the store group: the Manager member's replicated store.
func NewStoreCommand(g *cmdutil.Globals) *cobra.Command {
	cmd := cmdutil.NewGroup("store", "Inspect the Manager's store: schema versions, boot report, backups")
	cmd.AddCommand(newStoreInfoCommand(g))
	return cmd
}

func newStoreInfoCommand(g *cmdutil.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the store's schema versions, what this boot did to it, and its backups",
		Long: `Show the store of the Manager member called: each store's schema version (on
disk, and the newest this binary writes), what its last boot did — restored an
unreadable store from a backup (which, and why), or migrated the schema (from
which version, after taking which pre-upgrade backup) — and its backups, newest
first.`,
		Args: cmdutil.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.StoreInfo, error) { return m.GetStoreInfo(ctx) }, "store info")
			if err != nil {
				return err
			}
			return g.Printer().Print(cmdutil.Result{Data: info, Table: func(w io.Writer) { storeInfoTable(g, w, info) }})
		},
	}
}

func storeInfoTable(g *cmdutil.Globals, w io.Writer, info *norsk.StoreInfo) {
	fmt.Fprintf(w, "Data dir:\t%s\n", cmdutil.Dash(info.GetDataDir()))
	fmt.Fprintf(w, "Applied index:\t%d\n", info.GetAppliedIndex())
	for _, s := range info.GetStores() {
		v := fmt.Sprintf("schema version %d", s.GetSchemaVersion())
		if s.GetBinarySchemaVersion() != s.GetSchemaVersion() {
			v += fmt.Sprintf(" (this binary writes %d)", s.GetBinarySchemaVersion())
		} else {
			v += " (current)"
		}
		fmt.Fprintf(w, "Store %s:\t%s\n", s.GetName(), v)
	}
	b := info.GetBoot()
	fmt.Fprintf(w, "Booted:\t%s (%s)\n", cmdutil.Timestamp(b.GetBootedAt()), cmdutil.Ago(g.Now(), b.GetBootedAt()))
	if b.GetRestoredFromBackup() {
		s := "from " + cmdutil.Dash(b.GetRestoredBackup())
		if b.GetRestoreReason() != "" {
			s += ": " + b.GetRestoreReason()
		}
		if b.GetUnreadableStoreMovedTo() != "" {
			s += "; the unreadable store was moved to " + b.GetUnreadableStoreMovedTo()
		}
		fmt.Fprintf(w, "Restored:\t%s\n", s)
	} else {
		fmt.Fprintf(w, "Restored:\tno\n")
	}
	if b.GetMigrated() {
		fmt.Fprintf(w, "Migrated:\tschema %d → %d, after the pre-upgrade backup %s\n", b.GetMigratedFrom(), b.GetMigratedTo(), cmdutil.Dash(b.GetPreUpgradeBackup()))
	} else {
		fmt.Fprintf(w, "Migrated:\tno\n")
	}
	fmt.Fprintln(w)
	if len(info.GetBackups()) == 0 {
		fmt.Fprintln(w, "No backups.")
		return
	}
	fmt.Fprintln(w, "BACKUP\tINDEX\tSCHEMA\tCREATED\tSIZE\tREASON")
	for _, bk := range info.GetBackups() {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\n", bk.GetPath(), bk.GetIndex(), bk.GetSchemaVersion(), cmdutil.Timestamp(bk.GetCreatedAt()), cmdutil.BytesIEC(bk.GetBytes()), cmdutil.Dash(bk.GetReason()))
	}
}
