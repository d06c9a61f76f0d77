package audit

import (
	"bytes"
	"regexp"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

func TestPayloadSummary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"who":"peer:127.0.0.1:5000","method":"KvCommit","target":"kv/app","outcome":"ok","index":12}`, "who=peer:127.0.0.1:5000 method=KvCommit target=kv/app outcome=ok index=12"},
		{`{"a":null,"b":true,"c":1.5}`, "a=null b=true c=1.5"},
		{`{"nested":{"x":1}}`, `{"nested":{"x":1}}`},
		{`{"a":1} trailing`, `{"a":1} trailing`},
		{"two\nlines  here", "two lines here"},
		{"", ""},
	} {
		if got := payloadSummary(tc.in); got != tc.want {
			t.Errorf("payloadSummary(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := cmdutil.Truncate("abcdef", 4); got != "abc…" {
		t.Errorf("truncate = %q", got)
	}
	if got := cmdutil.BytesPreview([]byte{0, 1, 2}, 10); got != "(binary, 3 bytes)" {
		t.Errorf("bytesPreview = %q", got)
	}
}

// TestAuditTableShowsCaller (issue 12, item 3): the CALLER column is the
// caller the Manager recorded and hashed, never a name a payload claims.
func TestAuditTableShowsCaller(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	auditTable(&b, &norsk.AuditLogPage{ChainVerifiedAtBoot: true, Entries: []*managerv1.AuditLogEntry{
		{Seq: 3, Source: "external/norsk-mgr", Kind: "failover", Payload: `{"who":"manager"}`, Caller: "token:ops-alice/1f2e", CallerTokenId: "1f2e", HashVersion: 2},
		{Seq: 2, Source: "api", Kind: "KvCommit", Payload: `{"who":"token:bootstrap/9a from 127.0.0.1:5"}`, Caller: "token:bootstrap/9a", HashVersion: 2},
		{Seq: 1, Source: "api", Kind: "RevokeToken", Payload: `{"who":"token:admin/77"}`},
	}})
	out := b.String()
	for _, re := range []string{
		`(?m)^SEQ\s+TIME\s+SOURCE\s+CALLER\s+KIND\s+PAYLOAD$`,
		`(?m)^3\s+-\s+external/norsk-mgr\s+token:ops-alice/1f2e\s+failover\s+who=manager$`,
		`(?m)^2\s+-\s+api\s+token:bootstrap/9a\s+KvCommit\s+`,
		`(?m)^1\s+-\s+api\s+-\s+RevokeToken\s+who=token:admin/77$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("audit table lacks %s:\n%s", re, out)
		}
	}
}
