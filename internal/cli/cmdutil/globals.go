package cmdutil

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

// Globals are the settings every command shares (the global flags) and the
// connection to the Manager, made on first use.
type Globals struct {
	// ManagerURL is --manager-url ($NORSK_MANAGER_URL, else the local dev
	// Manager); Token is --token ($NORSK_TOKEN), TokenFile --token-file.
	ManagerURL string
	Token      string
	TokenFile  string
	// tokenFrom says where the token in use came from: "--token",
	// "--token-file", "dev:<path>" (found for a local dev) or "" (none).
	tokenFrom string
	// tlsCA and tlsCAHash are --tls-ca and --tls-ca-hash: how an https
	// Manager's certificate is verified (tls.go).
	tlsCA     string
	tlsCAHash string
	// Output is -o: table, wide, json, yaml, name or go-template=….
	Output string
	// Timeout bounds each call to the Manager (not the waits of --wait or
	// the events stream).
	Timeout time.Duration
	// Linearizable is --linearizable: every read is linearizable.
	Linearizable bool

	// In, Out and ErrOut are the run's standard streams; Now is its clock
	// (fixed in tests).
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	Now    func() time.Time
	// httpClient, when set, replaces the SDK's HTTP client (tests).
	httpClient *http.Client

	// Version is the client's version (the root's Version, else the build's),
	// sent in the client label and given to the programs norsk-ctl runs.
	Version string

	mgr *norsk.Manager
}

// NewGlobals returns the shared settings of one run of norsk-ctl on these
// streams; version is the client's version (sent in its client label).
func NewGlobals(in io.Reader, out, errOut io.Writer, version string) *Globals {
	return &Globals{In: in, Out: out, ErrOut: errOut, Now: time.Now, Version: version}
}

// Manager returns the connection to the Manager, connecting on first use.
func (g *Globals) Manager(ctx context.Context) (*norsk.Manager, error) {
	if g.mgr != nil {
		return g.mgr, nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	token, err := g.apiToken()
	if err != nil {
		return nil, err
	}
	m, err := norsk.Connect(ctx, norsk.Settings{
		URL:         g.ManagerURL,
		Token:       token,
		HTTPClient:  g.httpClient,
		ClientLabel: "norsk-ctl " + g.Version,
		Logger:      g.logger(),
		// The CLI's TLS flags (or $NORSK_TLS_CA, $NORSK_TLS_CA_HASH).
		CAFile:        g.tlsCA,
		CAFingerprint: g.tlsCAHash,
		// --linearizable: reads see every write committed before them.
		LinearizableReads: g.Linearizable,
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
func (g *Globals) apiToken() (string, error) {
	if g.Token != "" {
		g.tokenFrom = "--token"
		return g.Token, nil
	}
	path := g.TokenFile
	if path == "" {
		p, ok := devlocate.TokenFileFor(g.ManagerURL)
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

// UnauthenticatedHint is what an UNAUTHENTICATED answer is followed by:
// how to give a token, and where a dev keeps its own.
func (g *Globals) UnauthenticatedHint() string {
	def := devlocate.DefaultTokenFile()
	if def == "" {
		def = "<data-dir>/" + devlocate.TokenFileName
	}
	where := fmt.Sprintf("a norsk-manager dev keeps its admin token in <data-dir>/%s (by default %s), and norsk-ctl finds it by itself for a dev on this machine's loopback while that dev runs", devlocate.TokenFileName, def)
	switch {
	case g.tokenFrom == "":
		return "Hint: no API token was given: pass --token TOKEN or --token-file FILE (or set $" + norsk.EnvToken + " or $NORSK_TOKEN_FILE); " + where + "."
	case strings.HasPrefix(g.tokenFrom, "dev:"):
		return "Hint: the token of the dev Manager in " + strings.TrimPrefix(g.tokenFrom, "dev:") + " was refused: is the Manager at " + g.ManagerURL + " that dev? Pass --token or --token-file for another Manager."
	default:
		return "Hint: the token given with " + g.tokenFrom + " (or its environment variable) was refused by " + g.ManagerURL + ": it is unknown there, revoked or expired."
	}
}

// logger writes the SDK's notices (event-stream reconnects) to stderr,
// without timestamps.
func (g *Globals) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(g.ErrOut, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// Call returns the context of one call to the Manager: ctx bounded by
// --timeout.
func (g *Globals) Call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.Timeout)
}

// Close releases the connection.
func (g *Globals) Close() {
	if g.mgr != nil {
		g.mgr.Close()
		g.mgr = nil
	}
}

// Printer returns the printer -o selects.
func (g *Globals) Printer() printer {
	if text, ok := strings.CutPrefix(g.Output, templateOutput); ok {
		p, err := newTemplatePrinter(text, g.Out)
		if err == nil { // validate parsed it already
			return p
		}
	}
	return newPrinter(g.Output, g.Out)
}

// Human reports whether -o is for people: the table or its wide form.
func (g *Globals) Human() bool {
	return g.Output == "" || g.Output == "table" || g.Output == "wide"
}

// OutputFormats are the values -o takes (go-template= takes a template).
var OutputFormats = []string{"table", "wide", "json", "yaml", "name", templateOutput}

// templateOutput prefixes -o go-template=TEMPLATE.
const templateOutput = "go-template="

// Validate checks the global flags.
func (g *Globals) Validate() error {
	if text, ok := strings.CutPrefix(g.Output, templateOutput); ok {
		if _, err := newTemplatePrinter(text, g.Out); err != nil {
			return err
		}
	} else if !slices.Contains(OutputFormats, g.Output) {
		return UsageErrorf("invalid output format %q (want one of %s)", g.Output, strings.Join(OutputFormats, ", "))
	}
	if g.Timeout <= 0 {
		return UsageErrorf("--timeout must be positive")
	}
	if g.Token == "" {
		g.Token = os.Getenv(norsk.EnvToken)
	}
	return nil
}

// Ask connects to the Manager (once) and makes one call, bounded by
// --timeout; a failure is wrapped as "<what>: <error>" (what formatted with
// args).
func Ask[T any](g *Globals, cmd *cobra.Command, call func(context.Context, *norsk.Manager) (T, error), what string, args ...any) (T, error) {
	var zero T
	m, err := g.Manager(cmd.Context())
	if err != nil {
		return zero, err
	}
	ctx, cancel := g.Call(cmd.Context())
	defer cancel()
	v, err := call(ctx, m)
	if err != nil {
		return zero, fmt.Errorf(what+": %w", append(args, err)...)
	}
	return v, nil
}
