// Package cli implements norsk-ctl, the command-line client of the Norsk
// Manager: one cobra command per API call, grouped by noun (job, node, slot,
// events, audit, kv, store, operator, cluster, version), talking to the Manager only
// through the Go SDK (sdk/norsk); "operator snapshot inspect" reads snapshot
// files with pkg/snapshotfile and needs no Manager. cmd/norsk-ctl is a thin
// main around Main.
//
// Each command group lives in its own file and is built by a
// newXxxCommand(*globals) constructor listed in rootCommands; a new group (or
// the worker command) is plugged in by appending its constructor there.
// Results are written by a printer (printer.go) chosen with -o: a table for
// people, or the API's protobuf JSON (or its YAML form) for scripts.
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

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Version is the client's version, set at link time with
// -ldflags "-X github.com/norsk-go/norsk-manager/internal/cli.Version=v1.2.3";
// without it the module version from the build info is used.
var Version = ""

// rootCommands are the constructors of the top-level commands, in the order
// help lists them. To add a command group, write its constructor in its own
// file and append it here (e.g. newWorkerCommand).
var rootCommands = []func(*globals) *cobra.Command{
	newVersionCommand,
	newMgrCommand,
	newJobCommand,
	newBundleCommand,
	newMigrateCommand,
	newMigrationCommand,
	newNodeCommand,
	newSlotCommand,
	newEventsCommand,
	newAuditCommand,
	newKVCommand,
	newStoreCommand,
	newOperatorCommand,
	newWorkerCommand,
	newHostAgentCommand,
	newCHVMMCommand,
	newCHInitramfsCommand,
	newTokenCommand,
	newDiscoveryCommand,
	newAccessReplicaCommand,
	newClusterCommand,
	newLeaseCommand,
	newInstanceTypesCommand,
	newSecurityGroupsCommand,
	newReloadConfigCommand,
}

// streams. Main runs it; it is exported for documentation generators.
func NewRootCommand() *cobra.Command {
	return newRootCommand(globalsFor(os.Stdin, os.Stdout, os.Stderr))
}

func newRootCommand(g *globals) *cobra.Command {
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
		Args:              noSubcommand,
		RunE:              groupRun,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return g.validate() },
	}
	root.SetIn(g.in)
	root.SetOut(g.out)
	root.SetErr(g.errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	defaultURL := os.Getenv(norsk.EnvManagerURL)
	if defaultURL == "" {
		defaultURL = norsk.DefaultURL
	}
	f := root.PersistentFlags()
	f.StringVar(&g.managerURL, "manager-url", defaultURL, "URL of the Manager: host:port, http://… or https://…; in a cluster, several members comma-separated (the first that answers is used) (env "+norsk.EnvManagerURL+")")
	f.StringVar(&g.token, "token", "", "API bearer token (env "+norsk.EnvToken+")")
	f.StringVar(&g.tokenFile, "token-file", os.Getenv("NORSK_TOKEN_FILE"), "file holding the API bearer token (env NORSK_TOKEN_FILE)")
	registerTLSFlags(f, g)
	f.StringVarP(&g.output, "output", "o", "table", "output format: table, wide (the table with more columns), json, yaml, name (NOUN/ID per object) or go-template=TEMPLATE (on the JSON form)")
	f.DurationVar(&g.timeout, "timeout", 30*time.Second, "timeout of each call to the Manager")
	f.BoolVar(&g.linearizable, "linearizable", false, "linearizable reads: a read sees every write committed before it, on any member (needs a primary)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))

	for _, c := range rootCommands {
		root.AddCommand(c(g))
	}
	resolvePrefixes(g, root)
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

func run(ctx context.Context, g *globals, args []string) int {
	root := newRootCommand(g)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	g.close()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(g.errOut, "Error: %s\n", err)
	if errors.Is(err, norsk.ErrUnauthenticated) {
		fmt.Fprintln(g.errOut, g.unauthenticatedHint())
	}
	var ue usageError
	if errors.As(err, &ue) {
		if cmd != nil {
			fmt.Fprintf(g.errOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
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
func globalsFor(in io.Reader, out, errOut io.Writer) *globals {
	return newGlobals(in, out, errOut, clientVersion())
}
