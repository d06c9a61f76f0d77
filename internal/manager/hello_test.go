package manager

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Hello says the protocol the seed's features imply (1.10), the skew
// against the caller's, and carries the VersionInfo; a malformed version
// is INVALID_ARGUMENT naming the field.
func TestHelloProtocolAndSkew(t *testing.T) {
	t.Parallel()
	_, c, _ := startWithToken(t, nil)
	for _, tc := range []struct {
		caller     string
		skew       int32
		compatible bool
	}{
		{"1.10", 0, true},
		{"1.4", 6, true},
		{"1.12", -2, true},
		{"2.0", 0, false},
		{"", 0, true},
	} {
		res, err := c.Hello(context.Background(), connect.NewRequest(&managerv1.HelloRequest{ProtocolVersion: tc.caller}))
		if err != nil {
			t.Fatalf("Hello(%q): %v", tc.caller, err)
		}
		h := res.Msg
		if h.GetProtocolVersion() != "1.10" || h.GetSkew() != tc.skew || h.GetCompatible() != tc.compatible || h.GetCallerProtocolVersion() != tc.caller {
			t.Errorf("Hello(%q) = protocol %s, skew %d, compatible %v, caller %q; want 1.10, %d, %v, %q", tc.caller,
				h.GetProtocolVersion(), h.GetSkew(), h.GetCompatible(), h.GetCallerProtocolVersion(), tc.skew, tc.compatible, tc.caller)
		}
		if v := h.GetVersion(); v.GetMajorVersion() != buildinfo.ProtocolMajor || v.GetMinorVersion() != buildinfo.ProtocolMinor || v.GetLabel() != buildinfo.Label() {
			t.Errorf("Hello(%q).version = %v", tc.caller, v)
		}
	}
	if buildinfo.ProtocolVersion() != norsk.ProtocolVersion {
		t.Errorf("the Manager speaks %s, the SDK %s: raise both together", buildinfo.ProtocolVersion(), norsk.ProtocolVersion)
	}
	_, err := c.Hello(context.Background(), connect.NewRequest(&managerv1.HelloRequest{ProtocolVersion: "one"}))
	invalidOn(t, "Hello(one)", err, "protocolVersion")
}
