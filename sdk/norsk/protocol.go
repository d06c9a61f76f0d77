package norsk

import (
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
)

// ProtocolVersion is the wire-protocol version this SDK speaks
// ("major.minor"). Connect refuses a daemon whose major version differs;
// a daemon of an older minor is served, and the calls it predates are
// refused before they are sent (see protocolSince).
const ProtocolVersion = "1.10"

// protocolSince is the minor protocol version each call newer than 1.0
// came with, as the seed's client API names them. A Manager of an older
// minor does not know the call: the SDK refuses it with ErrUnimplemented,
// naming both versions, instead of sending it.
var protocolSince = map[string]int{
	"PauseLeases":               6,
	"ResumeLeases":              6,
	"GetLeaseStatus":            6,
	"GetDiscoveryFleet":         7,
	"RotateDiscoveryTierSecret": 7,
	"ListInstanceTypes":         10,
}

// ProtocolSkew is how the wire protocol of the Manager a connection reached
// compares with this SDK's. Minor is the Manager's minor version minus the
// SDK's: 0 the same, positive a newer Manager (it serves every call of this
// SDK; calls it added need a newer SDK), negative an older one (the calls
// it predates are refused with ErrUnimplemented).
type ProtocolSkew struct {
	// SDK is ProtocolVersion; Manager is the version the Manager said hello
	// with.
	SDK, Manager string
	// Minor is the Manager's minor version minus the SDK's.
	Minor int
}

// String says the skew in a few words: "same protocol 1.10", "Manager
// protocol 1.12 is 2 minor versions newer than this SDK's 1.10", …
func (s ProtocolSkew) String() string {
	switch {
	case s.Minor == 0:
		return "same protocol " + s.SDK
	case s.Minor > 0:
		return fmt.Sprintf("Manager protocol %s is %s newer than this SDK's %s", s.Manager, minors(s.Minor), s.SDK)
	}
	return fmt.Sprintf("Manager protocol %s is %s older than this SDK's %s: the calls it predates are refused", s.Manager, minors(-s.Minor), s.SDK)
}

func minors(n int) string {
	if n == 1 {
		return "1 minor version"
	}
	return strconv.Itoa(n) + " minor versions"
}

// Skew compares the Manager's protocol version (from its hello) with this
// SDK's. Known once connected; the same for the life of the connection.
func (m *Manager) Skew() ProtocolSkew {
	return ProtocolSkew{SDK: ProtocolVersion, Manager: m.hello.GetProtocolVersion(), Minor: minorOf(m.hello.GetProtocolVersion()) - minorOf(ProtocolVersion)}
}

// Version is the daemon's version information (its protocol version, build
// label, Go version and commit), as the seed's version property: known once
// connected — the daemon's hello carries it, or Connect asked for it — and
// the same for the life of the connection.
func (m *Manager) Version() *VersionInfo { return m.version }

// needsProtocol refuses op when the Manager's protocol predates it.
func (m *Manager) needsProtocol(op string) error {
	since, ok := protocolSince[op]
	if !ok || m.hello == nil {
		return nil
	}
	if have := minorOf(m.hello.GetProtocolVersion()); have < since {
		return &Error{Op: op, Code: connect.CodeUnimplemented, Message: fmt.Sprintf(
			"%s needs wire protocol 1.%d; the Manager at %s speaks %s (upgrade it)", op, since, m.url, m.hello.GetProtocolVersion())}
	}
	return nil
}

// minorOf returns the minor number of "major.minor", or -1 when v is not of
// that form.
func minorOf(v string) int {
	_, minor, ok := strings.Cut(v, ".")
	n, err := strconv.Atoi(minor)
	if !ok || err != nil || n < 0 {
		return -1
	}
	return n
}
