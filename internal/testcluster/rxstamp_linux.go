package testcluster

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// enableRxStamps asks the kernel to stamp every datagram c receives with
// the time it arrived (SO_TIMESTAMPNS), so an arrival time does not include
// how long the receiving goroutine took to be scheduled.
func enableRxStamps(c *net.UDPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return false
	}
	return true
}

// rxStamp reads the kernel's arrival stamp out of a datagram's control
// messages.
func rxStamp(oob []byte) (time.Time, bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(ts.Unix()), true
		}
	}
	return time.Time{}, false
}
