package state_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// forbiddenImports are packages the FSM must not use: clocks, randomness,
// the file system and the network (io is allowed, for snapshots).
var forbiddenImports = map[string]string{
	"math/rand":    "randomness",
	"math/rand/v2": "randomness",
	"crypto/rand":  "randomness",
	"os":           "the environment and the file system",
	"os/exec":      "other processes",
	"net":          "the network",
	"net/http":     "the network",
	"io/ioutil":    "the file system",
	"syscall":      "the operating system",
}

// allowedTimeNames are what of package time the FSM may name: its types.
var allowedTimeNames = map[string]bool{"Time": true, "Duration": true, "Month": true, "Weekday": true}

// clockCalls are named in the failure even when time is imported under
// another name.
var clockCalls = map[string]bool{"Now": true, "Since": true, "Until": true}

// TestStateIsDeterministic reads the package's non-test source and fails if
// it imports a clock, randomness, the file system or the network, or reads
// the wall clock.
func TestStateIsDeterministic(t *testing.T) {
	fset, files := stateSource(t)
	for _, f := range files {
		for _, msg := range nondeterminism(fset, f) {
			t.Error(msg)
		}
	}
}

// stateSource parses the package's non-test source files.
func stateSource(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no source files found")
	}
	return fset, files
}

// nondeterminism lists what in f breaks the FSM's determinism.
func nondeterminism(fset *token.FileSet, f *ast.File) []string {
	var out []string
	timeName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		pos := fset.Position(imp.Pos())
		if why, bad := forbiddenImports[path]; bad {
			out = append(out, pos.String()+": imports "+path+" ("+why+")")
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
			if timeName == "." || timeName == "_" {
				out = append(out, pos.String()+": imports time as "+timeName)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		pos := fset.Position(sel.Pos()).String()
		switch {
		case timeName != "" && x.Name == timeName && !allowedTimeNames[sel.Sel.Name]:
			out = append(out, pos+": uses time."+sel.Sel.Name+" (only time's types are allowed)")
		case x.Name == "time" && clockCalls[sel.Sel.Name]:
			out = append(out, pos+": calls time."+sel.Sel.Name)
		}
		return true
	})
	return out
}

// TestNondeterminismDetector checks the detector itself on sources that
// break the rule and sources that keep it.
func TestNondeterminismDetector(t *testing.T) {
	tests := []struct {
		name string
		src  string
		bad  int
	}{
		{"clean", `package p; import ("io"; "sort"); var _ io.Reader; var _ = sort.Strings`, 0},
		{"time types", `package p; import "time"; var a time.Time; var b time.Duration; func f(m time.Month) {}`, 0},
		{"time.Now", `package p; import "time"; var a = time.Now()`, 1},
		{"time.Since", `package p; import "time"; func f(t time.Time) time.Duration { return time.Since(t) }`, 1},
		{"time.Until", `package p; import "time"; func f(t time.Time) time.Duration { return time.Until(t) }`, 1},
		{"time.Sleep", `package p; import "time"; func f() { time.Sleep(1) }`, 1},
		{"time.Second", `package p; import "time"; var d = time.Second`, 1},
		{"renamed time", `package p; import clock "time"; var a = clock.Now()`, 1},
		{"dot time", `package p; import . "time"; var a = Now()`, 1},
		{"math/rand", `package p; import "math/rand"; var a = rand.Int()`, 1},
		{"math/rand/v2", `package p; import "math/rand/v2"; var a = rand.Int()`, 1},
		{"crypto/rand", `package p; import "crypto/rand"; var _ = rand.Reader`, 1},
		{"os", `package p; import "os"; var _ = os.Getenv("X")`, 1},
		{"net", `package p; import "net"; var _ = net.ParseIP`, 1},
		{"io/ioutil", `package p; import "io/ioutil"; var _ = ioutil.Discard`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", tt.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if got := nondeterminism(fset, f); len(got) != tt.bad {
				t.Errorf("found %d problems %q, want %d", len(got), got, tt.bad)
			}
		})
	}
}
