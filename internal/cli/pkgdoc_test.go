package cli

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPackageDocs: every package of the SDK and the CLI says what it is.
func TestPackageDocs(t *testing.T) {
	t.Parallel()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Skip("no source path")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for _, dir := range []string{"sdk/norsk", "sdk/norsk/norsktest", "internal/cli", "cmd/norsk-ctl"} {
		pkgs, err := parser.ParseDir(token.NewFileSet(), filepath.Join(root, dir), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for name, pkg := range pkgs {
			if strings.HasSuffix(name, "_test") {
				continue
			}
			documented := false
			for _, f := range pkg.Files {
				documented = documented || f.Doc != nil
			}
			if !documented {
				t.Errorf("package %s (%s) has no doc comment", name, dir)
			}
		}
	}
}
