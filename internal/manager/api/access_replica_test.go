package api_test

import (
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/manager/api"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
)

// TestAccessReplicaHandlers: publishing the access replica over a fake
// backend. Every signature is verified before anything is written: a
// publication that is malformed, signed by an untrusted key or does not
// move forward asks for no write. A member with no trusted keys refuses
// them all.
func TestAccessReplicaHandlers(t *testing.T) {
	t.Parallel()
	trusted, err := accessreplica.GenerateKey(jose.ES256, "k1")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := accessreplica.GenerateKey(jose.ES256, "k1")
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := accessreplica.PublicJWKS(trusted)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := api.LoadAccessReplicaKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(key *jose.JSONWebKey, version uint64, roles string) string {
		s, err := accessreplica.SignSnapshot(key, version, []byte(roles))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const roles = `{"alice":{"role":"admin"}}` // compact: as the Manager stores it
	v1 := &managerv1.AccessReplicaPublication{SnapshotJws: sign(trusted, 1, roles)}

	none := newEnv(t, nil)
	none.run(t, []hcase{
		{name: "NoKeys", do: call(none.h.PublishAccessReplica, &managerv1.PublishAccessReplicaRequest{Publication: v1}),
			code: connect.CodeFailedPrecondition, names: []string{"no access replica keys"}},
	})
	e := newEnv(t, func(c *api.Config) { c.AccessKeys = keys })
	h := e.h
	e.run(t, []hcase{
		{name: "NoPublication", do: call(h.PublishAccessReplica, &managerv1.PublishAccessReplicaRequest{}),
			code: connect.CodeInvalidArgument, names: []string{"publication:"}},
		{name: "Malformed", do: call(h.PublishAccessReplica, &managerv1.PublishAccessReplicaRequest{Publication: &managerv1.AccessReplicaPublication{SnapshotJws: "not.a.jws"}}),
			code: connect.CodeInvalidArgument, names: []string{"publication.snapshotJws:"}},
		{name: "Untrusted", do: call(h.PublishAccessReplica, &managerv1.PublishAccessReplicaRequest{Publication: &managerv1.AccessReplicaPublication{SnapshotJws: sign(stranger, 1, roles)}}),
			code: connect.CodeInvalidArgument, names: []string{"publication.snapshotJws:"}},
		{name: "Good", do: call(h.PublishAccessReplica, &managerv1.PublishAccessReplicaRequest{Publication: v1}),
			want: []*storev1.Command{{Cmd: &storev1.Command_PublishAccessReplica{PublishAccessReplica: &storev1.PublishAccessReplica{
				Publication: v1, Version: 1, RolesJson: []byte(roles)}}}},
			check: func(t *testing.T, resp proto.Message, _ []*storev1.Command) {
				if r := resp.(*managerv1.PublishAccessReplicaResponse); r.GetVersion() != 1 || !r.GetChanged() {
					t.Errorf("answered %v; want version 1, changed", r)
				}
			}},
		{name: "NotForward", do: call(h.PublishAccessReplica, &managerv1.PublishAccessReplicaRequest{Publication: v1}),
			code: connect.CodeFailedPrecondition, names: []string{"publication"}},
	})
}
