package norsk

import "time"

// SetBackoffForTest shortens the event stream's reconnect backoff of m.
func SetBackoffForTest(m *Manager, lo, hi time.Duration) { m.backoffMin, m.backoffMax = lo, hi }

// ProtocolSince is protocolSince, for its tests.
var ProtocolSince = protocolSince
