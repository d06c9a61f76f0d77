package norsk_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// wireManager answers Hello and JobById; the rest is unimplemented.
type wireManager struct {
	managerv1connect.UnimplementedManagerHandler
}

func (wireManager) Hello(context.Context, *connect.Request[managerv1.HelloRequest]) (*connect.Response[managerv1.DaemonHello], error) {
	return connect.NewResponse(&managerv1.DaemonHello{ProtocolVersion: norsk.ProtocolVersion, Compatible: true,
		Version: &managerv1.VersionInfo{Label: "wire"}}), nil
}

func (wireManager) JobById(_ context.Context, req *connect.Request[managerv1.JobByIdRequest]) (*connect.Response[managerv1.JobWithHistory], error) {
	return connect.NewResponse(&managerv1.JobWithHistory{Job: &managerv1.Job{JobId: req.Msg.GetJobId()}}), nil
}

// wireCall is how one call reached the server.
type wireCall struct {
	method      string
	protoMajor  int
	contentType string
	remote      string
}

// wireServer serves wireManager over HTTP/1.1 and cleartext HTTP/2,
// recording each call.
func wireServer(t *testing.T) (url string, calls func() []wireCall) {
	t.Helper()
	var mu sync.Mutex
	var seen []wireCall
	path, h := managerv1connect.NewManagerHandler(wireManager{})
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, wireCall{method: r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:],
			protoMajor: r.ProtoMajor, contentType: r.Header.Get("Content-Type"), remote: r.RemoteAddr})
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	hs := httptest.NewUnstartedServer(mux)
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL, func() []wireCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]wireCall(nil), seen...)
	}
}

// By default unary calls go in the Connect protocol (binary protobuf) over
// HTTP/1.1, one kept-alive connection reused call after call, and the
// server streams in gRPC over HTTP/2; Settings.GRPC sends every call in
// gRPC over HTTP/2 (decision 0067).
func TestCallProtocols(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		grpc        bool
		unaryMajor  int
		unaryPrefix string
	}{
		{"default", false, 1, "application/proto"},
		{"grpc", true, 2, "application/grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, calls := wireServer(t)
			ctx := context.Background()
			m, err := norsk.Connect(ctx, norsk.Settings{URL: url, GRPC: tc.grpc, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for range 3 {
				if j, err := m.JobById(ctx, "a"); err != nil || j.GetJob().GetJobId() != "a" {
					t.Fatalf("JobById = %v, %v", j, err)
				}
			}
			if _, err := m.SnapshotSave(ctx, &bytes.Buffer{}); !errors.Is(err, norsk.ErrUnimplemented) {
				t.Fatalf("SnapshotSave: %v, want ErrUnimplemented", err)
			}
			remotes := map[string]bool{}
			for _, c := range calls() {
				switch c.method {
				case "Hello", "JobById":
					remotes[c.remote] = true
					if c.protoMajor != tc.unaryMajor || !strings.HasPrefix(c.contentType, tc.unaryPrefix) {
						t.Errorf("%s over HTTP/%d as %q, want HTTP/%d, %s", c.method, c.protoMajor, c.contentType, tc.unaryMajor, tc.unaryPrefix)
					}
				case "SnapshotSave":
					if c.protoMajor != 2 || !strings.HasPrefix(c.contentType, "application/grpc") {
						t.Errorf("SnapshotSave over HTTP/%d as %q, want gRPC over HTTP/2", c.protoMajor, c.contentType)
					}
				default:
					t.Errorf("unexpected call %s", c.method)
				}
			}
			if len(remotes) != 1 {
				t.Errorf("the unary calls came over %d connections, want 1 reused: %v", len(remotes), remotes)
			}
		})
	}
}
