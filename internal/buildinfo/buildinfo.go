// Package buildinfo says what this binary is: its wire-protocol version,
// build label and the VCS revision it was built from.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Protocol version of the Manager's API ("major.minor"). The major changes
// only with an incompatible wire change; the minor with every addition.
// The seed's client API names what each minor brought, and this Manager
// serves all of it:
//
//	1.4   a discovery fleet of a single server (address, no addresses)
//	1.6   lease-protected jobs: PauseLeases, ResumeLeases, GetLeaseStatus
//	1.7   discovery fleets with addresses, GetDiscoveryFleet,
//	      RotateDiscoveryTierSecret (access-replica steps)
//	1.10  ListInstanceTypes; DaemonHello carries the VersionInfo
//
// Raise ProtocolMinor with every addition to the API, and say here what it
// brought (sdk/norsk.ProtocolVersion follows it).
const (
	ProtocolMajor = 1
	ProtocolMinor = 10
)

// Version is the release version, set at link time with
// -ldflags "-X github.com/norsk-go/norsk-manager/internal/buildinfo.Version=v1.2.3".
var Version = "0.1.0-dev"

// ProtocolVersion renders the protocol version.
func ProtocolVersion() string { return fmt.Sprintf("%d.%d", ProtocolMajor, ProtocolMinor) }

// ParseProtocol parses "major.minor".
func ParseProtocol(s string) (major, minor int, err error) {
	a, b, ok := strings.Cut(s, ".")
	if !ok {
		return 0, 0, fmt.Errorf("protocol version %q is not major.minor", s)
	}
	if major, err = strconv.Atoi(a); err != nil || major < 0 {
		return 0, 0, fmt.Errorf("protocol version %q is not major.minor", s)
	}
	if minor, err = strconv.Atoi(b); err != nil || minor < 0 {
		return 0, 0, fmt.Errorf("protocol version %q is not major.minor", s)
	}
	return major, minor, nil
}

// Commit is the VCS revision the binary was built from ("" if unknown),
// with "+dirty" when the tree had changes.
func Commit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// Label is a human build label: "0.1.0-dev (abc123def456, go1.26.8)".
func Label() string {
	parts := []string{runtime.Version()}
	if c := Commit(); c != "" {
		parts = append([]string{c}, parts...)
	}
	return Version + " (" + strings.Join(parts, ", ") + ")"
}
