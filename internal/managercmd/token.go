package managercmd

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/manager"
)

func newTokenCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "token",
		Short: "API tokens of a stopped member (use norsk-ctl token for a running one)",
	}
	c.AddCommand(newTokenBootstrapCommand())
	return c
}

func newTokenBootstrapCommand() *cobra.Command {
	var (
		cfg  manager.Config
		name string
		logs logFlags
	)
	c := &cobra.Command{
		Use:   "bootstrap",
		Short: "Make a new admin token in a stopped member's store (when every admin token is lost)",
		Long: `Make a new admin API token directly in the store of a member that is not
running, for when every admin token is lost. It is recorded in the audit log
like any other token. The token is printed once; the store keeps its hash.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			if cfg.DataDir == "" {
				return usageError{fmt.Errorf("--data-dir is required")}
			}
			cfg.Logger = log
			tok, err := manager.RecoverAdminToken(cmd.Context(), cfg, name)
			if err != nil {
				return err
			}
			fmt.Printf("new admin token %q (shown only now):\n\n  %s\n\n", name, tok)
			return nil
		},
	}
	c.Flags().StringVar(&cfg.DataDir, "data-dir", "", "the stopped member's data directory")
	c.Flags().StringVar(&name, "name", "recovered-admin", "the token's name")
	logs.register(c)
	return c
}
