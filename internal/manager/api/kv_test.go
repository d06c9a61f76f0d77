package api_test

import (
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
)

// TestKVHandlers: KV commits and reads over a fake backend.
func TestKVHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	put := func(k, v string) *managerv1.KvWrite {
		return &managerv1.KvWrite{Key: k, Op: &managerv1.KvWrite_Put{Put: []byte(v)}}
	}
	e.run(t, []hcase{
		{name: "KvCommit/NoNamespace", do: call(h.KvCommit, &managerv1.KvCommitRequest{Writes: []*managerv1.KvWrite{put("a", "1")}}),
			code: connect.CodeInvalidArgument, names: []string{"namespace:"}},
		{name: "KvCommit/Nothing", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app"}),
			code: connect.CodeInvalidArgument, names: []string{"writes:"}},
		{name: "KvCommit/EmptyKey", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1"), put("", "2")}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[1].key:"}},
		{name: "KvCommit/KeyTwice", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1"), put("a", "2")}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[1].key:"}},
		{name: "KvCommit/NoOp", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{{Key: "a"}}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[0]:"}},
		{name: "KvCommit/FalseDelete", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{{Key: "a", Op: &managerv1.KvWrite_Delete{}}}}),
			code: connect.CodeInvalidArgument, names: []string{"writes[0].delete:"}},
		{name: "KvCommit/NegativeSchema", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Options: &managerv1.KvCommitOptions{SetSchemaVersion: proto.Int64(-1)}}),
			code: connect.CodeInvalidArgument, names: []string{"options.setSchemaVersion:"}},
		{name: "KvCommit/Good", do: call(h.KvCommit, &managerv1.KvCommitRequest{Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1")}}),
			want: []*storev1.Command{{Cmd: &storev1.Command_KvCommit{KvCommit: &storev1.KvCommit{
				Namespace: "app", Writes: []*managerv1.KvWrite{put("a", "1")}, Options: &managerv1.KvCommitOptions{}}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if resp.(*managerv1.KvCommitResponse).GetRevision() == 0 {
					t.Errorf("answered %v; want the commit's revision", resp)
				}
			}},
		{name: "KvGet/NoKey", do: call(h.KvGet, &managerv1.KvGetRequest{Namespace: "app"}),
			code: connect.CodeInvalidArgument, names: []string{"key:"}},
		{name: "KvGet/ReadsTheCommit", do: call(h.KvGet, &managerv1.KvGetRequest{Namespace: "app", Key: "a"}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				if got := string(resp.(*managerv1.KvGetResponse).GetEntry().GetValue()); got != "1" || len(writes) != 0 {
					t.Errorf("KvGet = %q with writes %v; want the committed value, no write", got, writes)
				}
			}},
	})
}
