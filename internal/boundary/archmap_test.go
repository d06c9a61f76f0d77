package boundary

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// archDoc is the file whose package map the test checks, relative to the
// module root.
const archDoc = "docs/architecture.md"

// mapHeader starts the package map: a markdown table whose first column
// names the paths (backticked) and whose second says what they do.
const mapHeader = "| path | what |"

// archRow is one row of the package map: the paths its first cell names and
// the sentence of its second.
type archRow struct {
	line  int
	paths []string
	what  string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// parseArchMap reads the package map out of the architecture document: the
// rows of the table that starts with mapHeader. A path cell holds one or
// more backticked paths, in three forms besides the plain one:
// `a/{b,c}` (a/b and a/c), `…/x` (x beside the row's previous path:
// "`internal/cloudsim`, `…/ec2sim`" is internal/cloudsim/ec2sim) and a
// trailing slash (`tests/` is tests).
func parseArchMap(doc string) ([]archRow, error) {
	lines := strings.Split(doc, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == mapHeader })
	if start < 0 {
		return nil, fmt.Errorf("no table with the header %q", mapHeader)
	}
	var rows []archRow
	for i := start + 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		cells := strings.Split(strings.Trim(strings.TrimSpace(lines[i]), "|"), "|")
		if len(cells) < 2 {
			return nil, fmt.Errorf("line %d: a row needs a path and a what: %q", i+1, lines[i])
		}
		row := archRow{line: i + 1, what: strings.TrimSpace(strings.Join(cells[1:], "|"))}
		prev := ""
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			p := strings.TrimSuffix(m[1], "/")
			if rest, ok := strings.CutPrefix(p, "…/"); ok {
				if prev == "" {
					return nil, fmt.Errorf("line %d: %q has no path before it to be beside", i+1, m[1])
				}
				p = prev + "/" + rest
			} else {
				prev = p
			}
			row.paths = append(row.paths, expandBraces(p)...)
		}
		if len(row.paths) == 0 {
			return nil, fmt.Errorf("line %d: no backticked path in %q", i+1, cells[0])
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// expandBraces expands one `{a,b}` group: "x/{a,b}" is x/a and x/b.
func expandBraces(p string) []string {
	open, closing := strings.Index(p, "{"), strings.Index(p, "}")
	if open < 0 || closing < open {
		return []string{p}
	}
	var out []string
	for alt := range strings.SplitSeq(p[open+1:closing], ",") {
		out = append(out, expandBraces(p[:open]+strings.TrimSpace(alt)+p[closing+1:])...)
	}
	return out
}

func TestParseArchMap(t *testing.T) {
	t.Parallel()
	doc := "intro\n\n" + mapHeader + "\n|---|---|\n" +
		"| `cmd/a`, `cmd/b` | mains |\n" +
		"| `internal/runtime/{docker,process}` | runtimes |\n" +
		"| `internal/cloudsim`, `…/ec2sim`, `…/ocisim` | sims |\n" +
		"| `tests/` | scenarios |\n" +
		"\nafter | not a row\n"
	rows, err := parseArchMap(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join(r.paths, " ")+" = "+r.what)
	}
	want := []string{
		"cmd/a cmd/b = mains",
		"internal/runtime/docker internal/runtime/process = runtimes",
		"internal/cloudsim internal/cloudsim/ec2sim internal/cloudsim/ocisim = sims",
		"tests = scenarios",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []string{"no table here", mapHeader + "\n|---|---|\n| no path | x |\n", mapHeader + "\n|---|---|\n| `…/x` | x |\n"} {
		if _, err := parseArchMap(bad); err == nil {
			t.Errorf("parseArchMap(%q) accepted it", bad)
		}
	}
}

// TestArchitectureMapMatchesPackages keeps docs/architecture.md's package map
// equal to `go list ./...`: every package of the module has a row saying its
// job, and every path a row names is a package — or, for the wire protocol's
// .proto sources, a directory holding no Go package. A path listed twice is
// an error too.
func TestArchitectureMapMatchesPackages(t *testing.T) {
	t.Parallel()
	g := load(t)
	doc, err := os.ReadFile(filepath.Join(g.root, archDoc))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parseArchMap(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", archDoc, err)
	}
	own := map[string]bool{}
	for _, ip := range g.own {
		own[g.rel(ip)] = true
	}
	listed := map[string]int{}
	for _, r := range rows {
		if r.what == "" {
			t.Errorf("%s:%d: %v has no sentence saying what it does", archDoc, r.line, r.paths)
		}
		for _, p := range r.paths {
			if prev, dup := listed[p]; dup {
				t.Errorf("%s:%d: %s is listed again (first on line %d)", archDoc, r.line, p, prev)
				continue
			}
			listed[p] = r.line
			if own[p] {
				continue
			}
			if isNonGoDir(filepath.Join(g.root, filepath.FromSlash(p))) {
				continue
			}
			t.Errorf("%s:%d: %s is not a package of the module (go list ./...)", archDoc, r.line, p)
		}
	}
	for _, ip := range g.own {
		if p := g.rel(ip); listed[p] == 0 {
			t.Errorf("package %s is missing from %s's package map: add a row (its path and one sentence saying its job)", p, archDoc)
		}
	}
}

// isNonGoDir reports whether dir exists and holds no Go file (the .proto
// sources under api/proto, say).
func isNonGoDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
			return false
		}
	}
	return true
}
