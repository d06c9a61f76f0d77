package api_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
)

// Properties of the handlers that take a caller's message and write it,
// over any message the wire can carry: a refusal of the input
// (INVALID_ARGUMENT, and whatever else the handler checks on its snapshot
// first) asks the backend for no write; an acceptance asks for exactly one
// write, holding what was given (less what the Manager owns).

// checkOneWrite applies the properties to one call's outcome: want is the
// write an acceptance must make (its command's payload); a refusal with
// one of the codes before asks for no write.
func checkOneWrite(t *testing.T, err error, writes []*storev1.Command, want *storev1.Command, before ...connect.Code) {
	t.Helper()
	switch {
	case err != nil && slices.Contains(before, connect.CodeOf(err)):
		if len(writes) != 0 {
			t.Fatalf("refused (%v) after asking for %d write(s): %v", err, len(writes), writes)
		}
	case err != nil:
		// A refusal of the store (a rule that depends on its state):
		// the one write was asked for, and refused.
		if len(writes) > 1 {
			t.Fatalf("refused (%v) after %d writes; want at most one", err, len(writes))
		}
	default:
		if len(writes) != 1 {
			t.Fatalf("accepted after %d write(s) %v; want exactly one", len(writes), writes)
		}
		if got := (&storev1.Command{Cmd: writes[0].GetCmd()}); !proto.Equal(got, want) {
			t.Fatalf("wrote %v; want %v", got, want)
		}
		if !writes[0].GetTime().AsTime().Equal(t0) {
			t.Fatalf("write stamped %v; want the handler's clock %v", writes[0].GetTime().AsTime(), t0)
		}
	}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzCreateJob: any job the wire carries is refused with no write, or
// written exactly as given.
func FuzzCreateJob(f *testing.F) {
	f.Add(marshal(f, job("a")))
	f.Add(marshal(f, &managerv1.Job{JobId: "b"}))
	f.Add(marshal(f, &managerv1.Job{JobId: "c", Tags: map[string]string{"k": "v"}, Volumes: []string{"data"},
		Services: []*managerv1.Service{{Name: "main", Image: "x:1", Args: []string{"-v"}, VolumeMounts: []*managerv1.VolumeMount{{Source: "data", ContainerPath: "/data"}}}}}))
	f.Add(marshal(f, &managerv1.Job{JobId: "d", Services: []*managerv1.Service{{Name: "Main", Image: "x"}, {Name: "main"}}}))
	f.Add([]byte{})
	e := newEnv(f, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		j := &managerv1.Job{}
		if proto.Unmarshal(data, j) != nil {
			t.Skip("not a Job")
		}
		e.b.take()
		_, err := e.h.CreateJob(context.Background(), connect.NewRequest(&managerv1.CreateJobRequest{Job: j}))
		checkOneWrite(t, err, e.b.take(), &storev1.Command{Cmd: &storev1.Command_CreateJob{CreateJob: &storev1.CreateJob{Job: j}}},
			connect.CodeInvalidArgument, connect.CodeAlreadyExists) // the id is checked on the snapshot
	})
}

// FuzzKvCommit: any commit the wire carries is refused with no write, or
// written as given (options default to none).
func FuzzKvCommit(f *testing.F) {
	f.Add(marshal(f, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{{Key: "a", Op: &managerv1.KvWrite_Put{Put: []byte("1")}}}}))
	f.Add(marshal(f, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{{Key: "a", Op: &managerv1.KvWrite_Delete{Delete: true}}}}))
	f.Add(marshal(f, &managerv1.KvCommitRequest{Namespace: "app", Options: &managerv1.KvCommitOptions{SetSchemaVersion: proto.Int64(2)}}))
	f.Add(marshal(f, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{{Key: "a"}, {Key: "a"}}}))
	e := newEnv(f, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &managerv1.KvCommitRequest{}
		if proto.Unmarshal(data, m) != nil {
			t.Skip("not a KvCommitRequest")
		}
		opts := m.GetOptions()
		if opts == nil {
			opts = &managerv1.KvCommitOptions{}
		}
		e.b.take()
		_, err := e.h.KvCommit(context.Background(), connect.NewRequest(m))
		checkOneWrite(t, err, e.b.take(), &storev1.Command{Cmd: &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{
			Namespace: m.GetNamespace(), Writes: m.GetWrites(), Options: opts}}},
			connect.CodeInvalidArgument)
	})
}

// FuzzCreateBundle: any bundle the wire carries is refused with no write,
// or written as given with an id if it had none and the Manager's own
// fields (state, times, revision) cleared.
func FuzzCreateBundle(f *testing.F) {
	f.Add(marshal(f, bundle("b1", "")))
	f.Add(marshal(f, bundle("", "live")))
	f.Add(marshal(f, &managerv1.Bundle{BundleId: "b2", Revision: 7, State: managerv1.BundleState_BUNDLE_STATE_DELETING,
		Jobs: []*managerv1.BundleJobSpec{{JobName: "a", Job: job("a")}, {JobName: "b", Job: job("b"), CoLocateWith: []string{"a"}}}}))
	f.Add(marshal(f, &managerv1.Bundle{BundleId: "b3", Pool: "tin", Jobs: []*managerv1.BundleJobSpec{{JobName: "a"}}}))
	e := newEnv(f, func(c *api.Config) { c.Pools = map[string][]string{"live": nil} })
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &managerv1.Bundle{}
		if proto.Unmarshal(data, b) != nil {
			t.Skip("not a Bundle")
		}
		e.b.take()
		resp, err := e.h.CreateBundle(context.Background(), connect.NewRequest(&managerv1.CreateBundleRequest{Bundle: b}))
		writes := e.b.take()
		want := proto.Clone(b).(*managerv1.Bundle)
		if err == nil {
			if id := resp.Msg.GetBundleId(); id == "" || (b.GetBundleId() != "" && id != b.GetBundleId()) {
				t.Fatalf("answered id %q for a bundle given id %q", id, b.GetBundleId())
			}
			want.BundleId = resp.Msg.GetBundleId()
		}
		want.State, want.StopAt, want.LeaseExpiresAt, want.Revision, want.CreatedAt, want.DeletingReason = 0, nil, nil, 0, nil, ""
		// A duplicate bundle or replica job id is refused on the
		// handler's snapshot, before anything is written.
		checkOneWrite(t, err, writes, &storev1.Command{Cmd: &storev1.Command_CreateBundle{CreateBundle: &storev1.CreateBundle{Bundle: want}}},
			connect.CodeInvalidArgument, connect.CodeAlreadyExists)
		if proto.Equal(b, &managerv1.Bundle{}) && err == nil {
			t.Fatal("an empty bundle was accepted")
		}
	})
}

// FuzzClusterMemberRegisterAddress: the worker's dial-back address and
// incarnation, which the handler checks itself. An address the handler
// takes is one the Manager can dial (host:port, a host that is not the
// unspecified address, port 1-65535); a malformed one is refused naming
// it; nothing is written either way without a credential the store knows.
func FuzzClusterMemberRegisterAddress(f *testing.F) {
	for _, a := range []string{"10.0.0.2:7000", "w1:1", "[::1]:65535", "0.0.0.0:7000", "[::]:80", ":7000", "w1", "w1:0", "w1:65536", "w1:-1", "w1:07000", "a:b:c"} {
		f.Add(a, "")
	}
	f.Add("w1:7000", "inc-1_A")
	f.Add("w1:7000", "no spaces")
	f.Add("w1:7000", strings.Repeat("x", 65))
	e := newEnv(f, nil)
	f.Fuzz(func(t *testing.T, addr, incarnation string) {
		e.b.take()
		_, err := e.h.ClusterMemberRegister(context.Background(), connect.NewRequest(&managerv1.ClusterMemberRegisterRequest{
			Address: addr, WorkerIncarnation: incarnation, Token: "nrt_unknown",
		}))
		if w := e.b.take(); len(w) != 0 {
			t.Fatalf("an unknown registration token asked for writes: %v", w)
		}
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument:
			if !strings.Contains(err.Error(), "address:") && !strings.Contains(err.Error(), "workerIncarnation:") {
				t.Fatalf("refusal %q names neither address nor workerIncarnation", err)
			}
			if strings.Contains(err.Error(), "address:") && dialable(addr) {
				t.Fatalf("refused the dialable address %q: %v", addr, err)
			}
		case connect.CodeUnauthenticated:
			if !dialable(addr) {
				t.Fatalf("took the address %q, which the Manager cannot dial", addr)
			}
			if len(incarnation) > 64 || strings.IndexFunc(incarnation, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
			}) >= 0 {
				t.Fatalf("took the incarnation %q", incarnation)
			}
		default:
			t.Fatalf("ClusterMemberRegister(%q, %q) = %v; want INVALID_ARGUMENT or, for well-formed input, UNAUTHENTICATED", addr, incarnation, err)
		}
	})
}

// dialable says whether the Manager can dial addr back.
func dialable(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsUnspecified()
}
