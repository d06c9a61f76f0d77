package atomicfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
)

func TestWriteFileReplacesWithMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.json")
	for _, content := range []string{"one", "two, longer"} {
		if err := atomicfile.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Fatalf("read %q, want %q", b, content)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	onlyFile(t, path)
}

// A write that fails leaves the old contents and no temporary file.
func TestFailedWriteChangesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.json")
	if err := atomicfile.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		_, _ = w.Write([]byte("half of the new"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("read %q after a failed write", b)
	}
	onlyFile(t, path)
}

// A File's contents can be read back and checked before they replace the
// old; an aborted one changes nothing.
func TestCreateCheckThenCommitOrAbort(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "manager.snap")
	f, err := atomicfile.Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("snapshot"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the path exists before Commit: %v", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(f); string(b) != "snapshot" {
		t.Fatalf("read back %q", b)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // deferred in real use: a no-op after Commit
	if b, _ := os.ReadFile(path); string(b) != "snapshot" {
		t.Fatalf("read %q", b)
	}

	g, err := atomicfile.Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = g.WriteString("bad")
	g.Abort()
	if b, _ := os.ReadFile(path); string(b) != "snapshot" {
		t.Fatalf("read %q after an abort", b)
	}
	if err := g.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	onlyFile(t, path)
}

func onlyFile(t *testing.T, path string) {
	t.Helper()
	es, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(es) != 1 || es[0].Name() != filepath.Base(path) {
		t.Fatalf("directory holds %v (%v), want only %s", es, err, filepath.Base(path))
	}
}
