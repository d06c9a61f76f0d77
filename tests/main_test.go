package tests

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain skips the package under -short: every test here is an
// end-to-end scenario (real processes, clusters, containers, timers of
// seconds). make test runs them; make test-fast (-short) runs the
// packages' own tests only.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("tests: end-to-end scenarios, skipped under -short (make test runs them)")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
