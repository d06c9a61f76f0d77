package api_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
)

func bundle(id, pool string) *managerv1.Bundle {
	return &managerv1.Bundle{BundleId: id, Pool: pool, Jobs: []*managerv1.BundleJobSpec{{JobName: "enc", Job: job("enc")}}}
}

// TestBundleHandlers: the bundle calls over a fake backend. A pool must be
// one the member's configuration or a node names; the handler makes up an
// absent id and clears the fields the Manager owns.
func TestBundleHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Pools = map[string][]string{"live": {"gold"}} })
	h := e.h
	owned := bundle("", "gold")
	owned.State, owned.Revision, owned.CreatedAt, owned.DeletingReason = managerv1.BundleState_BUNDLE_STATE_DELETING, 99, timestamppb.New(t0), "mine"
	var made string
	e.run(t, []hcase{
		{name: "CreateBundle/NoBundle", do: call(h.CreateBundle, &managerv1.CreateBundleRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"bundle:"}},
		{name: "CreateBundle/NoJobs", do: call(h.CreateBundle, &managerv1.CreateBundleRequest{Bundle: &managerv1.Bundle{BundleId: "b1"}}),
			code: connect.CodeInvalidArgument, names: []string{"bundle.jobs:"}},
		{name: "CreateBundle/UnknownPool", do: call(h.CreateBundle, &managerv1.CreateBundleRequest{Bundle: bundle("b1", "tin")}),
			code: connect.CodeInvalidArgument, names: []string{"bundle.pool:", `"tin"`}},
		{name: "CreateBundle/UnknownResiliencePool", do: call(h.CreateBundle, &managerv1.CreateBundleRequest{Bundle: func() *managerv1.Bundle {
			b := bundle("b1", "live")
			b.ResiliencePolicy = &managerv1.ResiliencePolicy{Pool: "tin"}
			return b
		}()}), code: connect.CodeInvalidArgument, names: []string{"bundle.resiliencePolicy.pool:"}},
		{name: "CreateBundle/Good", do: call(h.CreateBundle, &managerv1.CreateBundleRequest{Bundle: bundle("b1", "live")}),
			want: []*storev1.Command{{Cmd: &storev1.Command_CreateBundle{CreateBundle: &storev1.CreateBundle{Bundle: bundle("b1", "live")}}}}},
		{name: "CreateBundle/IDAndOwnedFieldsStamped", do: call(h.CreateBundle, &managerv1.CreateBundleRequest{Bundle: owned}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				b := oneWrite(t, writes, func(c *storev1.Command) *managerv1.Bundle { return c.GetCreateBundle().GetBundle() })
				made = b.GetBundleId()
				if !strings.HasPrefix(made, "b-") || resp.(*managerv1.CreateBundleResponse).GetBundleId() != made {
					t.Errorf("bundle id %q, answered %q; want the one the handler made (b-…), answered", made, resp.(*managerv1.CreateBundleResponse).GetBundleId())
				}
				want := bundle(made, "gold")
				if !proto.Equal(b, want) {
					t.Errorf("wrote %v; want %v (the Manager's fields cleared)", b, want)
				}
			}},
		{name: "UpdateBundle/Unknown", do: call(h.UpdateBundle, &managerv1.UpdateBundleRequest{Bundle: bundle("b9", "")}),
			code: connect.CodeNotFound, names: []string{`"b9"`}},
		{name: "UpdateBundle/UnknownPool", do: call(h.UpdateBundle, &managerv1.UpdateBundleRequest{Bundle: bundle("b1", "tin")}),
			code: connect.CodeInvalidArgument, names: []string{"bundle.pool:"}},
		{name: "StopBundleJob/GraceTooLong", do: call(h.StopBundleJob, &managerv1.StopBundleJobRequest{BundleId: "b1", JobName: "enc", GraceMs: 3600001}),
			code: connect.CodeInvalidArgument, names: []string{"graceMs:"}},
		{name: "StopBundleJob/Unknown", do: call(h.StopBundleJob, &managerv1.StopBundleJobRequest{BundleId: "b9", JobName: "enc"}),
			code: connect.CodeNotFound, names: []string{`"b9"`}},
		{name: "StopBundleJob/Good", do: call(h.StopBundleJob, &managerv1.StopBundleJobRequest{BundleId: "b1", JobName: "enc", GraceMs: 100}),
			want: []*storev1.Command{{Cmd: &storev1.Command_SetBundleJobDormant{SetBundleJobDormant: &storev1.SetBundleJobDormant{
				BundleId: "b1", JobName: "enc", Dormant: true, GraceMs: 100}}}}},
		{name: "SetBundleStopTime/BadTime", do: call(h.SetBundleStopTime, &managerv1.SetBundleStopTimeRequest{BundleId: "b1", StopAt: &timestamppb.Timestamp{Nanos: -1}}),
			code: connect.CodeInvalidArgument, names: []string{"stopAt:"}},
		{name: "RenewBundleLease/TooShort", do: call(h.RenewBundleLease, &managerv1.RenewBundleLeaseRequest{BundleId: "b1", TtlMs: 999}),
			code: connect.CodeInvalidArgument, names: []string{"ttlMs:"}},
		{name: "RenewBundleLease/TooLong", do: call(h.RenewBundleLease, &managerv1.RenewBundleLeaseRequest{BundleId: "b1", TtlMs: (7*24*time.Hour + time.Millisecond).Milliseconds()}),
			code: connect.CodeInvalidArgument, names: []string{"ttlMs:"}},
		{name: "RenewBundleLease/FromTheClock", do: call(h.RenewBundleLease, &managerv1.RenewBundleLeaseRequest{BundleId: "b1", TtlMs: 30000}),
			want: []*storev1.Command{{Cmd: &storev1.Command_RenewBundleLease{RenewBundleLease: &storev1.RenewBundleLease{
				BundleId: "b1", ExpiresAt: timestamppb.New(t0.Add(30 * time.Second))}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if got := resp.(*managerv1.RenewBundleLeaseResponse).GetExpiresAt().AsTime(); !got.Equal(t0.Add(30 * time.Second)) {
					t.Errorf("answered expiry %v; want the clock plus the ttl", got)
				}
			}},
		{name: "DeleteBundle/BadID", do: call(h.DeleteBundle, &managerv1.DeleteBundleRequest{BundleId: "no spaces"}),
			code: connect.CodeInvalidArgument, names: []string{"bundleId:"}},
		{name: "DeleteBundle/Good", do: call(h.DeleteBundle, &managerv1.DeleteBundleRequest{BundleId: "b1"}),
			want: []*storev1.Command{{Cmd: &storev1.Command_DeleteBundle{DeleteBundle: &storev1.DeleteBundle{BundleId: "b1", Reason: "deleted by DeleteBundle"}}}}},
	})
}
