// Package boundary holds tests that keep the module's architecture: which
// packages may import which (read with `go list -deps`), that every
// package says what it is in a package doc comment, that
// docs/architecture.md's package map lists exactly the module's packages,
// and that no package under internal/ outgrows 3,000 lines of non-test code
// without a recorded reason.
package boundary

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// pkg is what `go list -json` says of a package (the fields used here).
type pkg struct {
	ImportPath   string
	Dir          string
	Name         string
	Doc          string
	Standard     bool
	Module       *struct{ Path string }
	Imports      []string
	Deps         []string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	Error        *struct{ Err string }
}

// graph is the module's packages and everything they depend on.
type graph struct {
	module string
	root   string
	pkgs   map[string]*pkg // by import path
	own    []string        // the module's packages, sorted
}

// rel is a module package's path relative to the module ("" for others).
func (g *graph) rel(importPath string) string {
	if importPath == g.module {
		return "."
	}
	r, ok := strings.CutPrefix(importPath, g.module+"/")
	if !ok {
		return ""
	}
	return r
}

var (
	loadOnce sync.Once
	loaded   *graph
	loadErr  error
)

func goTool(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go tool is not available: %v", err)
	}
	return goBin
}

// load runs `go list -e -deps -json ./...` once for all tests.
func load(t *testing.T) *graph {
	t.Helper()
	goBin := goTool(t)
	loadOnce.Do(func() {
		out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
		if err != nil {
			loadErr = fmt.Errorf("go list -m: %w", err)
			return
		}
		module, root, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
		if !ok {
			loadErr = fmt.Errorf("go list -m: %q", out)
			return
		}
		cmd := exec.Command(goBin, "list", "-e", "-deps", "-json", "./...")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		if err != nil {
			loadErr = fmt.Errorf("go list -deps: %w: %s", err, stderr.String())
			return
		}
		g := &graph{module: module, root: root, pkgs: map[string]*pkg{}}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			p := &pkg{}
			if err := dec.Decode(p); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				loadErr = fmt.Errorf("decode go list output: %w", err)
				return
			}
			g.pkgs[p.ImportPath] = p
			if g.rel(p.ImportPath) != "" {
				g.own = append(g.own, p.ImportPath)
			}
		}
		sort.Strings(g.own)
		loaded = g
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	for _, p := range loaded.own {
		if e := loaded.pkgs[p].Error; e != nil {
			t.Logf("go list reports %s: %s (its imports may be incomplete)", p, e.Err)
		}
	}
	return loaded
}

// under reports whether rel is dir or inside it ("a/b" is under "a").
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// rule forbids the packages under one of from to depend on what forbidden
// names.
type rule struct {
	name string
	// from are module-relative directories the rule applies to.
	from []string
	// mustExist are those of from that exist today: the rule failing to
	// match any package there means the rule has gone stale.
	mustExist []string
	// forbidden says whether a dependency (its import path, and its
	// module-relative path or "") is not allowed, and why.
	forbidden func(importPath, rel string) (bool, string)
}

func internalExcept(allowed ...string) func(string, string) (bool, string) {
	return func(_, rel string) (bool, string) {
		if under(rel, "internal") && !slices.ContainsFunc(allowed, func(a string) bool { return under(rel, a) }) {
			return true, "module internals"
		}
		return false, ""
	}
}

func anyOf(dirs ...string) func(string, string) (bool, string) {
	return func(_, rel string) (bool, string) {
		for _, d := range dirs {
			if under(rel, d) {
				return true, d
			}
		}
		return false, ""
	}
}

func both(a, b func(string, string) (bool, string)) func(string, string) (bool, string) {
	return func(ip, rel string) (bool, string) {
		if bad, why := a(ip, rel); bad {
			return true, why
		}
		return b(ip, rel)
	}
}

func external(paths ...string) func(string, string) (bool, string) {
	return func(ip, _ string) (bool, string) {
		for _, p := range paths {
			if ip == p || strings.HasPrefix(ip, p+"/") {
				return true, p
			}
		}
		return false, ""
	}
}

var managerSide = []string{"internal/store", "internal/manager", "internal/nodes", "internal/cluster", "internal/auth"}

var rules = []rule{
	{
		name: "the SDK imports nothing under internal/",
		from: []string{"sdk"}, mustExist: []string{"sdk"},
		forbidden: internalExcept(),
	},
	{
		name: "the FSM imports nothing under internal/ (pkg/apierr and pkg/jobspec are public), and no network, process or raft package",
		from: []string{"internal/store/state"}, mustExist: []string{"internal/store/state"},
		forbidden: both(internalExcept(),
			external("net/http", "os/exec", "github.com/hashicorp/raft")),
	},
	{
		name: "runtimes and the worker import nothing of the Manager's side",
		from: []string{"internal/runtime", "internal/worker"}, mustExist: []string{"internal/runtime"},
		forbidden: anyOf(managerSide...),
	},
	{
		name:      "the CLI imports nothing of the Manager's side (it talks through the SDK)",
		from:      []string{"internal/cli"},
		forbidden: anyOf(managerSide...),
	},
	{
		name: "norsk-mgr talks to its Manager member only through the SDK: it imports nothing under internal/ but its own",
		from: []string{"internal/mgr", "cmd/norsk-mgr"}, mustExist: []string{"internal/mgr", "cmd/norsk-mgr"},
		forbidden: internalExcept("internal/mgr", "internal/buildinfo"),
	},
	{
		name: "the AutoManager imports nothing of the Manager's side (it works through the SDK's interface)",
		from: []string{"internal/automanager"}, mustExist: []string{"internal/automanager"},
		forbidden: anyOf(managerSide...),
	},
	{
		name:      "the Manager and the CLI link no cloud SDK (only the binaries and the provider packages do: decision 0029)",
		from:      []string{"internal/manager", "internal/cli", "internal/testcluster", "internal/providers/cloudconf", "internal/providers/mock"},
		mustExist: []string{"internal/manager", "internal/providers/cloudconf"},
		forbidden: func(ip, rel string) (bool, string) {
			if under(rel, "internal/providers/aws") || under(rel, "internal/providers/oci") {
				return true, rel
			}
			return external("github.com/aws/aws-sdk-go-v2", "github.com/oracle/oci-go-sdk")(ip, rel)
		},
	},
	{
		name: "public packages import nothing under internal/ (the SDK and programs outside the module use them)",
		from: []string{"pkg"}, mustExist: []string{"pkg/apierr", "pkg/jobspec"},
		forbidden: internalExcept(),
	},
	{
		name: "a member's cluster life knows nothing of the daemon around it: internal/cluster imports nothing of internal/manager (the Server hands it a TermWork; decision 0052)",
		from: []string{"internal/cluster"}, mustExist: []string{"internal/cluster"},
		forbidden: anyOf("internal/manager"),
	},
	{
		name: "the in-memory runtime is for tests only: no package imports it, only test files do",
		from: []string{"cmd", "internal", "pkg", "sdk", "examples", "bench", "deploy", "tests"}, mustExist: []string{"cmd", "internal"},
		forbidden: anyOf("internal/runtime/fake"),
	},
}

// violation is one forbidden dependency and the import chain to it.
type violation struct {
	from, dep, why string
	chain          []string
}

func (v violation) String() string {
	return fmt.Sprintf("%s depends on %s (%s): %s", v.from, v.dep, v.why, strings.Join(v.chain, " → "))
}

// check applies a rule to the graph; it returns the violations and the
// packages the rule applied to.
func (g *graph) check(r rule) (vs []violation, matched []string) {
	for _, ip := range g.own {
		rel := g.rel(ip)
		if !slices.ContainsFunc(r.from, func(d string) bool { return under(rel, d) }) {
			continue
		}
		matched = append(matched, rel)
		for _, dep := range g.pkgs[ip].Deps {
			if bad, why := r.forbidden(dep, g.rel(dep)); bad {
				vs = append(vs, violation{from: rel, dep: dep, why: why, chain: g.chain(ip, dep)})
			}
		}
	}
	return vs, matched
}

// chain is a shortest import path from one package to another.
func (g *graph) chain(from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var c []string
			for ; p != ""; p = prev[p] {
				c = append(c, p)
			}
			slices.Reverse(c)
			return c
		}
		if q := g.pkgs[p]; q != nil {
			for _, imp := range q.Imports {
				if _, seen := prev[imp]; !seen {
					prev[imp] = p
					queue = append(queue, imp)
				}
			}
		}
	}
	return []string{from, "…", to}
}

func TestImportBoundaries(t *testing.T) {
	g := load(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			vs, matched := g.check(r)
			for _, v := range vs {
				t.Error(v)
			}
			for _, d := range r.mustExist {
				if !slices.ContainsFunc(matched, func(m string) bool { return under(m, d) }) {
					t.Errorf("no package under %s: the rule no longer guards anything; fix the rule", d)
				}
			}
			t.Logf("checked %d packages: %s", len(matched), strings.Join(matched, ", "))
		})
	}
}

// TestBoundaryChecker runs the rules on a made-up module, so that a rule
// that can never fire does not pass silently.
func TestBoundaryChecker(t *testing.T) {
	const m = "example.com/m"
	mk := func(imports map[string][]string) *graph {
		g := &graph{module: m, pkgs: map[string]*pkg{}}
		var deps func(p string, seen map[string]bool)
		deps = func(p string, seen map[string]bool) {
			for _, i := range imports[p] {
				if !seen[i] {
					seen[i] = true
					deps(i, seen)
				}
			}
		}
		for p, imps := range imports {
			seen := map[string]bool{}
			deps(p, seen)
			var ds []string
			for d := range seen {
				ds = append(ds, d)
			}
			sort.Strings(ds)
			g.pkgs[p] = &pkg{ImportPath: p, Imports: imps, Deps: ds}
			if g.rel(p) != "" {
				g.own = append(g.own, p)
			}
		}
		sort.Strings(g.own)
		return g
	}
	tests := []struct {
		name    string
		imports map[string][]string
		rule    int
		want    []string // "from → dep"
	}{
		{"sdk clean", map[string][]string{m + "/sdk/norsk": {m + "/api/gen/x", "net/http"}, m + "/api/gen/x": nil, "net/http": {"internal/poll"}}, 0, nil},
		{"sdk through a dependency", map[string][]string{
			m + "/sdk/norsk": {m + "/api/x"}, m + "/api/x": {m + "/internal/apierr"}, m + "/internal/apierr": nil,
		}, 0, []string{"sdk/norsk → " + m + "/internal/apierr"}},
		{"state allowed", map[string][]string{
			m + "/internal/store/state": {m + "/pkg/apierr", m + "/pkg/jobspec", "net"}, m + "/pkg/jobspec": {m + "/pkg/apierr"}, m + "/pkg/apierr": nil,
		}, 1, nil},
		{"state imports an internal package", map[string][]string{
			m + "/internal/store/state": {m + "/internal/clock"}, m + "/internal/clock": nil,
		}, 1, []string{"internal/store/state → " + m + "/internal/clock"}},
		{"state imports raft", map[string][]string{
			m + "/internal/store/state": {"github.com/hashicorp/raft"}, "github.com/hashicorp/raft": {"net"},
		}, 1, []string{"internal/store/state → github.com/hashicorp/raft"}},
		{"state imports raft-wal is not raft", map[string][]string{
			m + "/internal/store/state": {"github.com/hashicorp/raft-wal"},
		}, 1, nil},
		{"state imports events", map[string][]string{
			m + "/internal/store/state": {m + "/internal/events"}, m + "/internal/events": {"net/http"},
		}, 1, []string{"internal/store/state → " + m + "/internal/events", "internal/store/state → net/http"}},
		{"worker imports nodes", map[string][]string{
			m + "/internal/worker/agent": {m + "/internal/nodes"}, m + "/internal/nodes": nil,
		}, 2, []string{"internal/worker/agent → " + m + "/internal/nodes"}},
		{"runtime imports a store subpackage", map[string][]string{
			m + "/internal/runtime/docker": {m + "/internal/store/state"}, m + "/internal/store/state": nil,
		}, 2, []string{"internal/runtime/docker → " + m + "/internal/store/state"}},
		{"a sibling prefix is not under", map[string][]string{
			m + "/internal/runtimex": {m + "/internal/manager"}, m + "/internal/cli": {m + "/internal/managerx"},
		}, 2, nil},
		{"cli imports manager", map[string][]string{
			m + "/internal/cli": {m + "/internal/manager"}, m + "/internal/manager": nil,
		}, 3, []string{"internal/cli → " + m + "/internal/manager"}},
		{"the worker imports the in-memory runtime", map[string][]string{
			m + "/internal/worker": {m + "/internal/runtime/fake"}, m + "/internal/runtime/fake": {m + "/internal/runtime"}, m + "/internal/runtime": nil,
		}, len(rules) - 1, []string{"internal/worker → " + m + "/internal/runtime/fake"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, _ := mk(tt.imports).check(rules[tt.rule])
			var got []string
			for _, v := range vs {
				got = append(got, v.from+" → "+v.dep)
				if len(v.chain) < 2 || v.chain[len(v.chain)-1] != v.dep {
					t.Errorf("chain %v does not end at %s", v.chain, v.dep)
				}
			}
			sort.Strings(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("violations %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPackagesHaveDocComments: every package of the module says what it is
// in a doc comment ("// Package x …", or "// Command x …" for a main
// package). Packages whose Go files are not committed yet (work in progress
// in this checkout) are reported without failing; committed ones fail.
func TestPackagesHaveDocComments(t *testing.T) {
	g := load(t)
	for _, ip := range g.own {
		p := g.pkgs[ip]
		rel := g.rel(ip)
		if strings.HasPrefix(rel, "api/gen/") {
			continue // generated by protoc-gen-go; documented by the .proto files
		}
		files := append(append([]string{}, p.GoFiles...), p.CgoFiles...)
		if len(files) == 0 {
			// A directory of tests only: its doc comment sits on a test file.
			files = append(append(files, p.TestGoFiles...), p.XTestGoFiles...)
		}
		ok, err := hasPackageDoc(p.Dir, p.Name, files)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if ok {
			continue
		}
		msg := fmt.Sprintf("%s (package %s) has no package doc comment: add \"// Package %s …\" to one of its files (a doc.go will do)", rel, p.Name, p.Name)
		if p.Name == "main" {
			msg = fmt.Sprintf("%s (a command) has no package doc comment: add \"// Command %s …\" above its package clause", rel, path.Base(rel))
		}
		t.Error(msg)
	}
}

// hasPackageDoc reports whether one of files (in dir) has a package doc
// comment: "Package <name> …" for a library, any for a command.
func hasPackageDoc(dir, name string, files []string) (bool, error) {
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return false, err
		}
		if af.Doc == nil {
			continue
		}
		text := af.Doc.Text()
		if name == "main" && strings.TrimSpace(text) != "" {
			return true, nil
		}
		if rest, ok := strings.CutPrefix(text, "Package "+name); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\n') {
			return true, nil
		}
	}
	return false, nil
}
