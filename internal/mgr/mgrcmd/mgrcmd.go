// Package mgrcmd is the norsk-mgr command line: flags into an mgr.Config,
// then run until interrupted.
package mgrcmd

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/mgr"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Execute runs the command and returns the process exit code.
func Execute() int {
	if err := Command().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "norsk-mgr:", err)
		return 1
	}
	return 0
}

// Command is the norsk-mgr root command.
func Command() *cobra.Command {
	var cfg mgr.Config
	var debug bool
	c := &cobra.Command{
		Use:   "norsk-mgr",
		Short: "The operator console and control-plane companion beside a Manager member",
		Long: `norsk-mgr runs beside one Manager member and talks to it only through the API.
It serves the operator console, announces its URL to the member, takes the
active role when the active norsk-mgr goes stale, and while active publishes
the discovery fleet and the role-store replica; it always serves a discovery
replica. Its state lives in the Manager's KV store (namespace norsk-mgr).`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := mgr.New(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "norsk-mgr beside member %s: console %s, discovery replica %s\n", s.Member(), s.URL(), s.DiscoveryAddress())
			<-ctx.Done()
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Manager.URL, "manager-url", "", "the Manager member's API URL (default $"+norsk.EnvManagerURL+", else "+norsk.DefaultURL+")")
	f.StringVar(&cfg.Manager.Token, "token", "", "API token with the admin role (default $"+norsk.EnvToken+")")
	f.StringVar(&cfg.Manager.CAFile, "tls-ca", "", "PEM file of the CA that verifies an https:// Manager")
	f.StringVar(&cfg.Manager.CAFingerprint, "tls-ca-hash", "", "the Manager CA's fingerprint, sha256:<hex>")
	f.StringVar(&cfg.Listen, "listen", mgr.DefaultListen, "console address")
	f.StringVar(&cfg.PublicURL, "public-url", "", "the console's URL as browsers and workers reach it (default http(s)://<listen>)")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "serve the console over HTTPS with this certificate")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "the private key of --tls-cert")
	f.StringVar(&cfg.DiscoveryListen, "discovery-listen", mgr.DefaultDiscoveryListen, "discovery replica address")
	f.StringVar(&cfg.DiscoveryAddress, "discovery-address", "", "host:port the fleet names for this replica (default the listener's)")
	f.DurationVar(&cfg.Interval, "interval", mgr.DefaultInterval, "announce and lease-check interval; a standby takes over after three")
	f.StringVar(&cfg.SigningKeysFile, "signing-keys", "", "JWKS of private keys that sign the role-store replica (the last signs); the Manager's --access-replica-keys holds their public halves")
	f.StringVar(&cfg.AdminUser, "admin-user", "", "create this admin when the role store has no user (with --admin-password)")
	f.StringVar(&cfg.AdminPassword, "admin-password", "", "the password of --admin-user (default $NORSK_MGR_ADMIN_PASSWORD)")
	f.BoolVar(&debug, "debug", false, "debug logs")
	c.PreRun = func(*cobra.Command, []string) {
		if cfg.AdminPassword == "" {
			cfg.AdminPassword = os.Getenv("NORSK_MGR_ADMIN_PASSWORD")
		}
	}
	return c
}
