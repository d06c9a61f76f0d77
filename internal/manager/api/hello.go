package api

import (
	"context"
	"runtime"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/buildinfo"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func (h *Handler) Hello(ctx context.Context, req *connect.Request[managerv1.HelloRequest]) (*connect.Response[managerv1.DaemonHello], error) {
	out := &managerv1.DaemonHello{
		ProtocolVersion: buildinfo.ProtocolVersion(),
		BuildLabel:      buildinfo.Label(),
		NodeName:        h.cfg.NodeName,
		Compatible:      true,
		CaFingerprint:   h.b.CAFingerprint(),
		Version:         versionInfo(),
	}
	if v := req.Msg.GetProtocolVersion(); v != "" {
		out.CallerProtocolVersion = v
		major, minor, err := buildinfo.ParseProtocol(v)
		if err != nil {
			return nil, rpcerr.ToConnect(apierr.Invalid("protocolVersion", "%v", err))
		}
		out.Compatible = major == buildinfo.ProtocolMajor
		if out.Compatible {
			out.Skew = int32(buildinfo.ProtocolMinor - minor)
		}
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) Version(ctx context.Context, req *connect.Request[managerv1.VersionRequest]) (*connect.Response[managerv1.VersionInfo], error) {
	return connect.NewResponse(versionInfo()), nil
}

// versionInfo is what Version answers, and Hello carries.
func versionInfo() *managerv1.VersionInfo {
	return &managerv1.VersionInfo{
		MajorVersion: buildinfo.ProtocolMajor,
		MinorVersion: buildinfo.ProtocolMinor,
		Label:        buildinfo.Label(),
		GoVersion:    runtime.Version(),
		Commit:       buildinfo.Commit(),
	}
}
