package manager

import (
	"context"
	"runtime"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func (h *handler) Hello(ctx context.Context, req *connect.Request[managerv1.HelloRequest]) (*connect.Response[managerv1.DaemonHello], error) {
	out := &managerv1.DaemonHello{
		ProtocolVersion: buildinfo.ProtocolVersion(),
		BuildLabel:      buildinfo.Label(),
		NodeName:        h.s.cfg.NodeName,
		Compatible:      true,
		CaFingerprint:   h.s.CAFingerprint(),
	}
	if v := req.Msg.GetProtocolVersion(); v != "" {
		major, minor, err := buildinfo.ParseProtocol(v)
		if err != nil {
			return nil, toConnect(apierr.Invalid("protocolVersion", "%v", err))
		}
		out.Compatible = major == buildinfo.ProtocolMajor
		if out.Compatible {
			out.Skew = int32(buildinfo.ProtocolMinor - minor)
		}
	}
	return connect.NewResponse(out), nil
}

func (h *handler) Version(ctx context.Context, req *connect.Request[managerv1.VersionRequest]) (*connect.Response[managerv1.VersionInfo], error) {
	return connect.NewResponse(&managerv1.VersionInfo{
		MajorVersion: buildinfo.ProtocolMajor,
		MinorVersion: buildinfo.ProtocolMinor,
		Label:        buildinfo.Label(),
		GoVersion:    runtime.Version(),
		Commit:       buildinfo.Commit(),
	}), nil
}
