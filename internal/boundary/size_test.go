package boundary

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxPackageLines is the most non-test Go a package under internal/ may
// hold without a decision saying why (issue 13).
const maxPackageLines = 3000

// largePackages are the packages under internal/ allowed over
// maxPackageLines, each with the decision (or issue) that says why. An entry
// whose package has shrunk under the limit fails the test, so the list only
// ever names packages that need it.
var largePackages = map[string]string{
	"internal/automanager": "decision 0057: one View, Policy and Metrics under the planner, the saga and the drains",
	"internal/store/state": "decision 0057: one deterministic state machine over one set of tables",
}

// nonTestLines counts the lines of a directory's Go files that are not
// tests, as `cat $(ls DIR/*.go | grep -v _test.go) | wc -l` does.
func nonTestLines(dir string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		n += bytes.Count(b, []byte("\n"))
	}
	return n, nil
}

// TestPackageSize: no package under internal/ holds more than
// maxPackageLines of non-test code unless largePackages names it with its
// reason.
func TestPackageSize(t *testing.T) {
	t.Parallel()
	g := load(t)
	seen := map[string]bool{}
	for _, ip := range g.own {
		rel := g.rel(ip)
		if !under(rel, "internal") {
			continue
		}
		n, err := nonTestLines(filepath.Join(g.root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		why, allowed := largePackages[rel]
		seen[rel] = true
		switch {
		case n > maxPackageLines && !allowed:
			t.Errorf("%s holds %d lines of non-test code (over %d): split it by domain, or record why not in a decision and list it in largePackages", rel, n, maxPackageLines)
		case n <= maxPackageLines && allowed:
			t.Errorf("%s holds %d lines of non-test code, within %d: drop its largePackages entry (%s)", rel, n, maxPackageLines, why)
		}
	}
	for rel := range largePackages {
		if !seen[rel] {
			t.Errorf("largePackages names %s, which is no package of the module", rel)
		}
	}
}
