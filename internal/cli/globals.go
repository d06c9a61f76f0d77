package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/internal/devlocate"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

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

	// version is the client's version (the root's Version, else the build's),
	// sent in the client label and given to the programs norsk-ctl runs.
	version string

	mgr *norsk.Manager
}

func newGlobals(in io.Reader, out, errOut io.Writer, version string) *globals {
	return &globals{in: in, out: out, errOut: errOut, now: time.Now, version: version}
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
		ClientLabel: "norsk-ctl " + g.version,
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
