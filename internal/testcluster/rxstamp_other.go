//go:build !linux

package testcluster

import (
	"net"
	"time"
)

// enableRxStamps: kernel arrival stamps are read on Linux only; elsewhere an
// arrival is stamped when the receiver reads it.
func enableRxStamps(*net.UDPConn) bool { return false }

func rxStamp([]byte) (time.Time, bool) { return time.Time{}, false }
