//go:build race

package sim_test

// raceEnabled: this test binary runs under the race detector (make test's
// race pass), where TestSmoke runs the same paths with fewer nodes and jobs.
const raceEnabled = true
