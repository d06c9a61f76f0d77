// Package cli implements norsk-ctl, the command-line client of the Norsk
// Manager: one cobra command per API call, grouped by noun (job, node, slot,
// events, audit, kv, store, operator, cluster, version), talking to the Manager only
// through the Go SDK (sdk/norsk); "operator snapshot inspect" reads snapshot
// files with pkg/snapshotfile and needs no Manager. cmd/norsk-ctl is a thin
// main around Main.
//
// Each command group lives in its own subpackage (internal/cli/jobs, nodes,
// bundles, …) and is built by a NewXxxCommand(*cmdutil.Globals) constructor
// listed in rootCommands; a new group is plugged in by appending its
// constructor there. What the groups share — the global flags and the
// connection, argument checks, and the printer chosen with -o (a table for
// people, or the API's protobuf JSON or its YAML form for scripts) — is
// internal/cli/cmdutil. This package keeps the root command, Main, version and
// the worker command.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/cli/audit"
	"github.com/norsk-go/norsk-manager/internal/cli/bundles"
	"github.com/norsk-go/norsk-manager/internal/cli/cluster"
	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/internal/cli/console"
	"github.com/norsk-go/norsk-manager/internal/cli/discovery"
	"github.com/norsk-go/norsk-manager/internal/cli/events"
	"github.com/norsk-go/norsk-manager/internal/cli/jobs"
	"github.com/norsk-go/norsk-manager/internal/cli/kv"
	"github.com/norsk-go/norsk-manager/internal/cli/migrations"
	"github.com/norsk-go/norsk-manager/internal/cli/nodes"
	"github.com/norsk-go/norsk-manager/internal/cli/slots"
	"github.com/norsk-go/norsk-manager/internal/cli/store"
	"github.com/norsk-go/norsk-manager/internal/cli/tokens"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Version is the client's version, set at link time with
// -ldflags "-X github.com/norsk-go/norsk-manager/internal/cli.Version=v1.2.3";
// without it the module version from the build info is used.
var Version = ""

// rootCommands are the constructors of the top-level commands, in the order
// help lists them. To add a command group, write its constructor in its own
// subpackage (or, for a noun's new verb, in the noun's) and append it here.
var rootCommands = []func(*cmdutil.Globals) *cobra.Command{
	newVersionCommand,
	console.NewMgrCommand,
	jobs.NewJobCommand,
	bundles.NewBundleCommand,
	migrations.NewMigrateCommand,
	migrations.NewMigrationCommand,
	nodes.NewNodeCommand,
	slots.NewSlotCommand,
	events.NewEventsCommand,
	audit.NewAuditCommand,
	kv.NewKVCommand,
	store.NewStoreCommand,
	store.NewOperatorCommand,
	newWorkerCommand,
	nodes.NewHostAgentCommand,
	nodes.NewCHVMMCommand,
	nodes.NewCHInitramfsCommand,
	tokens.NewTokenCommand,
	discovery.NewDiscoveryCommand,
	discovery.NewAccessReplicaCommand,
	cluster.NewClusterCommand,
	cluster.NewLeaseCommand,
	nodes.NewInstanceTypesCommand,
	nodes.NewSecurityGroupsCommand,
	nodes.NewReloadConfigCommand,
}

// NewRootCommand builds the norsk-ctl command tree writing to the standard
// streams. Main runs it; it is exported for documentation generators.
func NewRootCommand() *cobra.Command {
	return newRootCommand(globalsFor(os.Stdin, os.Stdout, os.Stderr))
}

func newRootCommand(g *cmdutil.Globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "norsk-ctl",
		Short: "Control a Norsk Manager: jobs, nodes, cluster slots, events, audit log, KV store, Manager cluster",
		Long: `norsk-ctl talks to a Norsk Manager (--manager-url, $NORSK_MANAGER_URL; the local
development Manager by default) and covers its API: jobs and their instances,
nodes, cluster slots (registered local servers), the event stream, the audit
log, the key/value store, the store's state and snapshots, and the Manager
cluster's members and quorum.

Reads are served from the copy of the member called, which on a follower may
trail the primary by a few milliseconds; --linearizable makes them see every
write committed before they began (at the cost of a round trip to the primary).

A job, node, bundle, cluster slot, API token or migration may be named by a
unique prefix of its id (an exact id wins; an ambiguous prefix is an error
listing the candidates).

Output is a table by default (-o wide: lists with more columns); -o json prints the API's protobuf JSON and -o yaml
the same as YAML, for scripts; -o name prints NOUN/ID per object (job/news-1)
and -o go-template=TEMPLATE runs a Go template on the JSON form
('-o go-template={{range .}}{{.jobId}} {{end}}').`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		Args:              cmdutil.NoSubcommand,
		RunE:              cmdutil.GroupRun,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return g.Validate() },
	}
	root.SetIn(g.In)
	root.SetOut(g.Out)
	root.SetErr(g.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cmdutil.AsUsageError(err) })

	defaultURL := os.Getenv(norsk.EnvManagerURL)
	if defaultURL == "" {
		defaultURL = norsk.DefaultURL
	}
	f := root.PersistentFlags()
	f.StringVar(&g.ManagerURL, "manager-url", defaultURL, "URL of the Manager: host:port, http://… or https://…; in a cluster, several members comma-separated (the first that answers is used) (env "+norsk.EnvManagerURL+")")
	f.StringVar(&g.Token, "token", "", "API bearer token (env "+norsk.EnvToken+")")
	f.StringVar(&g.TokenFile, "token-file", os.Getenv("NORSK_TOKEN_FILE"), "file holding the API bearer token (env NORSK_TOKEN_FILE)")
	cmdutil.RegisterTLSFlags(f, g)
	f.StringVarP(&g.Output, "output", "o", "table", "output format: table, wide (the table with more columns), json, yaml, name (NOUN/ID per object) or go-template=TEMPLATE (on the JSON form)")
	f.DurationVar(&g.Timeout, "timeout", 30*time.Second, "timeout of each call to the Manager")
	f.BoolVar(&g.Linearizable, "linearizable", false, "linearizable reads: a read sees every write committed before it, on any member (needs a primary)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(cmdutil.OutputFormats, cobra.ShellCompDirectiveNoFileComp))

	for _, c := range rootCommands {
		root.AddCommand(c(g))
	}
	cmdutil.ResolvePrefixes(g, root)
	return root
}

// Exit codes of Main.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Main runs norsk-ctl with args (without the program name) and returns the
// exit code: 0, 1 for a failed command, 2 for a usage error. Errors are
// printed to stderr as "Error: <message>". ctx ends long-running commands
// (events, --wait) when cancelled, e.g. on an interrupt.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, globalsFor(stdin, stdout, stderr), args)
}

func run(ctx context.Context, g *cmdutil.Globals, args []string) int {
	root := newRootCommand(g)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	g.Close()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(g.ErrOut, "Error: %s\n", err)
	if errors.Is(err, norsk.ErrUnauthenticated) {
		fmt.Fprintln(g.ErrOut, g.UnauthenticatedHint())
	}
	var ue cmdutil.UsageError
	if errors.As(err, &ue) {
		if cmd != nil {
			fmt.Fprintf(g.ErrOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ExitUsage
	}
	return ExitError
}

// TranslateLegacyMode rewrites the seed's worker invocation,
// "norsk-ctl --mode=worker --token=… --manager-url=…", into the worker
// subcommand: when args (without the program name) hold --mode=worker or
// --mode worker, that flag is dropped and "worker" put first. Other
// arguments are returned unchanged.
func TranslateLegacyMode(args []string) []string {
	for i, a := range args {
		switch {
		case a == "--mode=worker" || a == "-mode=worker":
			return slices.Concat([]string{"worker"}, args[:i], args[i+1:])
		case (a == "--mode" || a == "-mode") && i+1 < len(args) && args[i+1] == "worker":
			return slices.Concat([]string{"worker"}, args[:i], args[i+2:])
		case a == "--":
			return args
		}
	}
	return args
}

// clientVersion is Version, else the module version of the build.
func clientVersion() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// globalsFor returns the shared settings of a run on these streams, with the
// client's version.
func globalsFor(in io.Reader, out, errOut io.Writer) *cmdutil.Globals {
	return cmdutil.NewGlobals(in, out, errOut, clientVersion())
}
