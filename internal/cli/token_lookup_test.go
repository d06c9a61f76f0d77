package cli

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/devlocate"
)

// A dev on any loopback port is found by the record it leaves: norsk-ctl
// sends its token with no flag. With no token at all, or a refused one, an
// UNAUTHENTICATED answer is followed by a hint naming --token/--token-file
// and where dev keeps its token.
func TestDevTokenLookupAndHints(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("NORSK_TOKEN", "")
	t.Setenv("NORSK_TOKEN_FILE", "")
	f := newFixture(t)
	f.srv.RequireToken("nmt_dev")
	u, err := url.Parse(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()

	// No dev recorded: no token, and a hint.
	code, _, errOut := f.run("", "job", "list")
	if code != ExitError || !strings.Contains(errOut, "UNAUTHENTICATED") ||
		!strings.Contains(errOut, "Hint: no API token was given: pass --token TOKEN or --token-file FILE") ||
		!strings.Contains(errOut, filepath.Join("norsk-manager", "dev", "admin.token")) {
		t.Fatalf("with no token: exit %d, stderr %q; want UNAUTHENTICATED and the hint", code, errOut)
	}

	// The dev serving this port recorded its token file: found, sent.
	tok := filepath.Join(t.TempDir(), devlocate.TokenFileName)
	if err := os.WriteFile(tok, []byte("nmt_dev\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remove, err := devlocate.Record("http://127.0.0.1:"+port, tok)
	if err != nil {
		t.Fatal(err)
	}
	f.ok("job", "list")
	if got := f.srv.LastAuthorization(); got != "Bearer nmt_dev" {
		t.Errorf("Authorization %q; want dev's token", got)
	}
	// The same dev spelled localhost:PORT.
	var out, errB strings.Builder
	g := globalsFor(strings.NewReader(""), &out, &errB)
	if code := run(t.Context(), g, []string{"--manager-url", "localhost:" + port, "job", "list"}); code != 0 {
		t.Errorf("localhost:%s: exit %d: %s", port, code, errB.String())
	}

	// A stale dev token: the hint says which file was used.
	if err := os.WriteFile(tok, []byte("nmt_old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = f.run("", "job", "list")
	if code != ExitError || !strings.Contains(errOut, "Hint: the token of the dev Manager in "+tok+" was refused") {
		t.Errorf("stale dev token: exit %d, stderr %q", code, errOut)
	}
	// A token given is used over dev's, and named in the hint when refused.
	code, _, errOut = f.run("", "--token", "nmt_wrong", "job", "list")
	if code != ExitError || !strings.Contains(errOut, "Hint: the token given with --token") {
		t.Errorf("refused --token: exit %d, stderr %q", code, errOut)
	}
	remove()
	code, _, errOut = f.run("", "job", "list")
	if code != ExitError || !strings.Contains(errOut, "Hint: no API token was given") {
		t.Errorf("after dev stopped: exit %d, stderr %q", code, errOut)
	}
}
