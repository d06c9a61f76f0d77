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
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/devlocate"
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

// globals are the settings every command shares (the global flags) and the
// connection to the Manager, made on first use.
type globals struct {
	// managerURL is --manager-url ($NORSK_MANAGER_URL, else the local dev
	// Manager); token is --token ($NORSK_TOKEN).
	managerURL string
	token      string
	tokenFile  string
	// tokenFrom says where the token in use came from: "--token",
	// "--token-file", "dev:<path>" (found for a local dev) or "" (none).
	tokenFrom string
	// tlsCA and tlsCAHash are --tls-ca and --tls-ca-hash: how an https
	// Manager's certificate is verified (tls.go).
	tlsCA     string
	tlsCAHash string
	// output is -o: table, wide, json, yaml, name or go-template=….
	output string
	// timeout bounds each call to the Manager (not the waits of --wait or
	// the events stream).
	timeout time.Duration
	// linearizable is --linearizable: every read is linearizable.
	linearizable bool

	in     io.Reader
	out    io.Writer
	errOut io.Writer
	now    func() time.Time
	// httpClient, when set, replaces the SDK's HTTP client (tests).
	httpClient *http.Client

	mgr *norsk.Manager
}

func newGlobals(in io.Reader, out, errOut io.Writer) *globals {
	return &globals{in: in, out: out, errOut: errOut, now: time.Now}
}

// manager returns the connection to the Manager, connecting on first use.
func (g *globals) manager(ctx context.Context) (*norsk.Manager, error) {
	if g.mgr != nil {
		return g.mgr, nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	token, err := g.apiToken()
	if err != nil {
		return nil, err
	}
	m, err := norsk.Connect(ctx, norsk.Settings{
		URL:         g.managerURL,
		Token:       token,
		HTTPClient:  g.httpClient,
		ClientLabel: "norsk-ctl " + clientVersion(),
		Logger:      g.logger(),
		// The CLI's TLS flags (or $NORSK_TLS_CA, $NORSK_TLS_CA_HASH).
		CAFile:        g.tlsCA,
		CAFingerprint: g.tlsCAHash,
		// --linearizable: reads see every write committed before them.
		LinearizableReads: g.linearizable,
	})
	if err != nil {
		return nil, tlsHint(err)
	}
	g.mgr = m
	return m, nil
}

// apiToken is the bearer for API calls: --token ($NORSK_TOKEN), else the
// contents of --token-file ($NORSK_TOKEN_FILE), else — talking to a
// `norsk-manager dev` on this machine's loopback, on any port — the token
// that dev keeps in its data directory (internal/devlocate). It notes in
// g.tokenFrom where the token came from, for the hint an UNAUTHENTICATED
// answer gets.
func (g *globals) apiToken() (string, error) {
	if g.token != "" {
		g.tokenFrom = "--token"
		return g.token, nil
	}
	path := g.tokenFile
	if path == "" {
		p, ok := devlocate.TokenFileFor(g.managerURL)
		if !ok {
			return "", nil
		}
		path, g.tokenFrom = p, "dev:"+p
	} else {
		g.tokenFrom = "--token-file"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// unauthenticatedHint is what an UNAUTHENTICATED answer is followed by:
// how to give a token, and where a dev keeps its own.
func (g *globals) unauthenticatedHint() string {
	def := devlocate.DefaultTokenFile()
	if def == "" {
		def = "<data-dir>/" + devlocate.TokenFileName
	}
	where := fmt.Sprintf("a norsk-manager dev keeps its admin token in <data-dir>/%s (by default %s), and norsk-ctl finds it by itself for a dev on this machine's loopback while that dev runs", devlocate.TokenFileName, def)
	switch {
	case g.tokenFrom == "":
		return "Hint: no API token was given: pass --token TOKEN or --token-file FILE (or set $" + norsk.EnvToken + " or $NORSK_TOKEN_FILE); " + where + "."
	case strings.HasPrefix(g.tokenFrom, "dev:"):
		return "Hint: the token of the dev Manager in " + strings.TrimPrefix(g.tokenFrom, "dev:") + " was refused: is the Manager at " + g.managerURL + " that dev? Pass --token or --token-file for another Manager."
	default:
		return "Hint: the token given with " + g.tokenFrom + " (or its environment variable) was refused by " + g.managerURL + ": it is unknown there, revoked or expired."
	}
}

// logger writes the SDK's notices (event-stream reconnects) to stderr,
// without timestamps.
func (g *globals) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(g.errOut, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// call returns the context of one call to the Manager: ctx bounded by
// --timeout.
func (g *globals) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.timeout)
}

// close releases the connection.
func (g *globals) close() {
	if g.mgr != nil {
		g.mgr.Close()
		g.mgr = nil
	}
}

// printer returns the printer -o selects.
func (g *globals) printer() printer {
	if text, ok := strings.CutPrefix(g.output, templateOutput); ok {
		p, err := newTemplatePrinter(text, g.out)
		if err == nil { // validate parsed it already
			return p
		}
	}
	return newPrinter(g.output, g.out)
}

// human reports whether -o is for people: the table or its wide form.
func (g *globals) human() bool {
	return g.output == "" || g.output == "table" || g.output == "wide"
}

// NewRootCommand builds the norsk-ctl command tree writing to the standard
// streams. Main runs it; it is exported for documentation generators.
func NewRootCommand() *cobra.Command {
	return newRootCommand(newGlobals(os.Stdin, os.Stdout, os.Stderr))
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

var outputFormats = []string{"table", "wide", "json", "yaml", "name", templateOutput}

// templateOutput prefixes -o go-template=TEMPLATE.
const templateOutput = "go-template="

// validate checks the global flags.
func (g *globals) validate() error {
	if text, ok := strings.CutPrefix(g.output, templateOutput); ok {
		if _, err := newTemplatePrinter(text, g.out); err != nil {
			return err
		}
	} else if !slices.Contains(outputFormats, g.output) {
		return usageErrorf("invalid output format %q (want one of %s)", g.output, strings.Join(outputFormats, ", "))
	}
	if g.timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	if g.token == "" {
		g.token = os.Getenv(norsk.EnvToken)
	}
	return nil
}

// newGroup returns a command that only holds subcommands: without one it
// prints its help, with an unknown one it is a usage error.
func newGroup(use, short string, aliases ...string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Aliases: aliases, Args: noSubcommand, RunE: groupRun}
}

func noSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	cmd.SuggestionsMinimumDistance = 2
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageError{errors.New(msg)}
}

func groupRun(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// usageError is a mistake in the command line: Main exits with 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exactArgs is cobra.ExactArgs with a usage error that names the arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErrorf("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// minArgs requires at least the named arguments.
func minArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usageErrorf("%s needs at least %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// optionalArgs takes at most the named (optional) arguments.
func optionalArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > len(names) {
			return usageErrorf("%s takes at most %d argument(s) ([%s]), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
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
	return run(ctx, newGlobals(stdin, stdout, stderr), args)
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

// ask connects to the Manager (once) and makes one call, bounded by
// --timeout; a failure is wrapped as "<what>: <error>" (what formatted with
// args).
func ask[T any](g *globals, cmd *cobra.Command, call func(context.Context, *norsk.Manager) (T, error), what string, args ...any) (T, error) {
	var zero T
	m, err := g.manager(cmd.Context())
	if err != nil {
		return zero, err
	}
	ctx, cancel := g.call(cmd.Context())
	defer cancel()
	v, err := call(ctx, m)
	if err != nil {
		return zero, fmt.Errorf(what+": %w", append(args, err)...)
	}
	return v, nil
}
