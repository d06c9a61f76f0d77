package localregistry

import (
	"context"
	"errors"
	"testing"
)

// ForTest starts a registry in a test directory, stopped when the test
// ends. It skips the test, saying why, when docker-registry is not
// installed.
func ForTest(t testing.TB) *Registry {
	t.Helper()
	r, err := Start(context.Background(), t.TempDir(), "", nil)
	if errors.Is(err, ErrNoBinary) {
		t.Skipf("no image registry: %v", err)
	}
	if err != nil {
		t.Fatalf("start the image registry: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}
