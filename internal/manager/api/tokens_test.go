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
	"github.com/norsk-go/norsk-manager/internal/auth"
)

// TestTokenHandlers: API tokens over a fake backend. The handler mints the
// id and secret (the store keeps only the secret's hash) and stamps the
// expiry from its clock.
func TestTokenHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	h := e.h
	e.run(t, []hcase{
		{name: "CreateToken/BadName", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "-x", Role: "operator"}),
			code: connect.CodeInvalidArgument, names: []string{"name:"}},
		{name: "CreateToken/UnknownRole", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "root"}),
			code: connect.CodeInvalidArgument, names: []string{"role:", `"root"`}},
		{name: "CreateToken/NegativeTTL", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "operator", TtlS: -1}),
			code: connect.CodeInvalidArgument, names: []string{"ttlS:"}},
		{name: "CreateToken/TTLOverACentury", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "operator", TtlS: 100*365*24*3600 + 1}),
			code: connect.CodeInvalidArgument, names: []string{"ttlS:"}},
		{name: "CreateToken/Good", do: call(h.CreateToken, &managerv1.CreateTokenRequest{Name: "ci", Role: "operator", TtlS: 3600}),
			check: func(t *testing.T, resp proto.Message, writes []*storev1.Command) {
				w := oneWrite(t, writes, func(c *storev1.Command) *storev1.CreateToken { return c.GetCreateToken() })
				r := resp.(*managerv1.CreateTokenResponse)
				id, hash, err := auth.ParseToken(r.GetSecret())
				if err != nil || id != w.GetToken().GetId() || hash != w.GetSecretHash() {
					t.Errorf("answered secret %q (%v) does not parse to the written id %q and hash", r.GetSecret(), err, w.GetToken().GetId())
				}
				want := &managerv1.ApiToken{Id: id, Name: "ci", Role: "operator", ExpiresAt: timestamppb.New(t0.Add(time.Hour))}
				if !proto.Equal(w.GetToken(), want) {
					t.Errorf("wrote %v; want %v", w.GetToken(), want)
				}
				if strings.Contains(w.String(), r.GetSecret()) {
					t.Error("the write holds the bearer secret; the store keeps only its hash")
				}
			}},
		{name: "RevokeToken/Unknown", do: call(h.RevokeToken, &managerv1.RevokeTokenRequest{Id: "0123456789abcdef"}),
			code: connect.CodeNotFound, names: []string{`"0123456789abcdef"`}},
	})
}
