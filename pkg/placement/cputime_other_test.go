//go:build !unix

package placement

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
