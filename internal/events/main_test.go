package events_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind (a subscriber
// blocked in Next that nothing woke).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
