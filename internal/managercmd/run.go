package managercmd

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/manager"
)

func newRunCommand() *cobra.Command {
	var (
		cfg        manager.Config
		configPath string
		logs       logFlags
	)
	c := &cobra.Command{
		Use:   "run",
		Short: "Run a Manager member",
		Long: `Run a Manager member: the API (gRPC and Connect JSON on one port, with
/healthz and /metrics), the replicated store in --data-dir, and the
connections to every registered worker. Settings come from flags, then from
--config (a config.yaml), then from defaults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			if configPath != "" {
				fc, err := LoadConfigFile(configPath)
				if err != nil {
					return usageError{err}
				}
				fc.Apply(&cfg)
				if !cmd.Flags().Changed("log-level") && fc.LogLevel != "" {
					logs.level = fc.LogLevel
				}
				if !cmd.Flags().Changed("log-format") && fc.LogFormat != "" {
					logs.format = fc.LogFormat
				}
				if log, err = logs.logger(os.Stderr); err != nil {
					return err
				}
			}
			if cfg.DataDir == "" {
				return usageError{fmt.Errorf("--data-dir (or dataDir in --config) is required")}
			}
			if cfg.BootstrapToken == "" {
				cfg.BootstrapToken = os.Getenv("NORSK_BOOTSTRAP_TOKEN")
			}
			if cfg.ClusterSecret == "" && cfg.ClusterSecretFile == "" {
				cfg.ClusterSecret = os.Getenv("NORSK_CLUSTER_SECRET")
			}
			cfg.Logger = log
			console := cmd.ErrOrStderr()
			// In a new cluster the member that becomes primary first makes
			// the token, possibly long after New has returned: it is shown
			// when it is made, once, on the console only (the store keeps
			// its hash).
			cfg.OnBootstrapToken = func(tok string) { printBootstrapToken(console, tok, cfg.DataDir) }
			s, err := manager.New(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(console, "norsk-manager %s serving the API at %s (data in %s)\n", s.NodeName(), s.URL(), cfg.DataDir)
			printTLS(console, s)
			<-cmd.Context().Done()
			return s.Close()
		},
	}
	f := c.Flags()
	f.StringVar(&configPath, "config", "", "config.yaml to read settings from")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory of the replicated store")
	f.StringVar(&cfg.NodeName, "node-name", "", "this member's name (default: the hostname)")
	f.StringVar(&cfg.Listen, "listen", "", "API address (default 127.0.0.1:6790)")
	f.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "URL workers and clients reach this member at (default http://<listen>)")
	f.DurationVar(&cfg.LostGrace, "lost-grace", 0, "how long a worker may go unheard (its stream reset or silent) before its node is lost and its jobs move (default 1.5s)")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 0, "worker heartbeat interval (default 500ms); a worker unheard for the lost grace is lost")
	f.DurationVar(&cfg.DefaultIdleExpiry, "idle-expiry", 0, "daemon-wide idle expiry of empty elastic nodes (default 10m)")
	f.StringVar(&cfg.BackupDir, "backup-dir", "", "where backups go (default <data-dir>/backups)")
	f.DurationVar(&cfg.BackupInterval, "backup-interval", 0, "how often a scheduled backup is taken (default 1h; negative: never)")
	f.IntVar(&cfg.BackupRetain, "backup-retain", 0, "how many scheduled backups are kept (default 24)")
	registerTLSFlags(f, &cfg)
	f.Float64Var(&cfg.RateLimit, "rate-limit", 0, "API calls per second each caller may make (default 1000)")
	f.StringVar(&cfg.AccessReplicaKeysFile, "access-replica-keys", "", "JWKS file of the public keys access replicas are signed with (without it PublishAccessReplica is refused)")
	f.StringVar(&cfg.ClusterState, "cluster-state", "", "new (form the cluster named by clusterNodes in --config) or existing (join a running cluster that expects this member)")
	f.StringVar(&cfg.RaftListen, "raft-listen", "", "raft's address in a cluster (default :6792)")
	f.StringVar(&cfg.RaftAdvertise, "raft-advertise", "", "the raft address the other members reach this one at (default: its clusterNodes entry)")
	f.StringVar(&cfg.ClusterSecretFile, "cluster-secret-file", "", "file holding the members' shared secret (or $NORSK_CLUSTER_SECRET)")
	f.BoolVar(&cfg.Witness, "witness", false, "run as a witness: vote, hold no job state, serve no API")
	logs.register(c)
	return c
}

// printBootstrapToken shows a new store's bootstrap admin token once.
func printBootstrapToken(w io.Writer, tok, dataDir string) {
	fmt.Fprintf(w, "\nThis is a new store. Its bootstrap admin token, shown only now:\n\n  %s\n\nKeep it safe (export NORSK_TOKEN=…); make other tokens with 'norsk-ctl token create'.\nIf it is lost: stop the Manager and run 'norsk-manager token bootstrap --data-dir %s'.\n\n", tok, dataDir)
}
