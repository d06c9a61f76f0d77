package manager

import (
	"testing"

	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
)

// FuzzParseConfigFile: any bytes as a config.yaml either decode or are
// refused; they never panic, and what decodes applies to a Config.
func FuzzParseConfigFile(f *testing.F) {
	for _, seed := range []string{
		"nodeName: m1\ndataDir: /var/lib/norsk\nlisten: 127.0.0.1:6790\n",
		"lostGrace: 20s\nbackupInterval: -1s\nbackupRetain: 3\n",
		"tls: on\ntlsCertFile: /a\n",
		"clusterNodes:\n- {name: m1, raft: 'm1:6792', api: 'http://m1:6790'}\n- {name: w1, raft: 'w1:6792', api: 'http://w1:6790', witness: true}\nclusterSecretFile: /s\n",
		"unknownKey: 1\n",
		"lostGrace: [1, 2]\n",
		"{",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fc, err := ParseConfigFile(b)
		if err != nil {
			return
		}
		var cfg Config
		fc.Apply(&cfg)
	})
}

// FuzzRequestValidators: arbitrary bytes decoded as the requests whose
// validation is the Manager's own (KV commits, audit appends, discovery
// fleets, tokens) never panic the validators.
func FuzzRequestValidators(f *testing.F) {
	seed := func(m proto.Message) {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	v1 := int64(1)
	seed(&managerv1.KvCommitRequest{Namespace: "ns", Writes: []*managerv1.KvWrite{{Key: "k", Op: &managerv1.KvWrite_Put{Put: []byte("v")}, ExpectedRevision: &v1}}})
	seed(&managerv1.AppendAuditEntryRequest{Source: "s", Kind: "k", Payload: "{}"})
	seed(&managerv1.PublishDiscoveryFleetRequest{Fleet: &managerv1.DiscoveryFleet{Addresses: []string{"a:1"}, LeafToken: "l", TierSecret: "t"}})
	seed(&managerv1.CreateTokenRequest{Name: "n", Role: "admin", TtlS: 60})
	f.Fuzz(func(t *testing.T, b []byte) {
		kv := &managerv1.KvCommitRequest{}
		if proto.Unmarshal(b, kv) == nil {
			opts := kv.GetOptions()
			if opts == nil {
				opts = &managerv1.KvCommitOptions{}
			}
			_ = state.ValidateKVCommit(kv.GetNamespace(), kv.GetWrites(), opts)
		}
		au := &managerv1.AppendAuditEntryRequest{}
		if proto.Unmarshal(b, au) == nil {
			_ = state.ValidateAuditAppend(au.GetSource(), au.GetKind(), au.GetPayload())
		}
		df := &managerv1.PublishDiscoveryFleetRequest{}
		if proto.Unmarshal(b, df) == nil {
			_ = state.ValidateDiscoveryFleet(df.GetFleet())
		}
		tk := &managerv1.CreateTokenRequest{}
		if proto.Unmarshal(b, tk) == nil {
			_ = state.ValidateTokenRequest(tk.GetName(), tk.GetRole(), tk.GetTtlS())
		}
	})
}
