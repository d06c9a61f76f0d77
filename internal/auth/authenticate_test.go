package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// TestAuthenticateAPITokens: an API token is parsed by ParseToken alone,
// and each way it can be refused keeps its message and whether the member
// would first catch up with the primary (only a well-formed token this
// member does not hold may have been made a moment ago).
func TestAuthenticateAPITokens(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	st := state.New(state.Limits{})
	var idx uint64
	mint := func(name string, tok func(*managerv1.ApiToken)) string {
		t.Helper()
		id, bearer, hash := MintToken()
		at := &managerv1.ApiToken{Id: id, Name: name, Role: state.RoleOperator}
		if tok != nil {
			tok(at)
		}
		idx++
		if res := st.Apply(idx, &storev1.Command{Time: timestamppb.New(t0), Cmd: &storev1.Command_CreateToken{CreateToken: &storev1.CreateToken{Token: at, SecretHash: hash}}}); res.Err != nil {
			t.Fatalf("create token %s: %v", name, res.Err)
		}
		return bearer
	}
	good := mint("good", nil)
	revoked := mint("gone", nil)
	revokedID, _, _ := ParseToken(revoked)
	idx++
	if res := st.Apply(idx, &storev1.Command{Time: timestamppb.New(t0), Cmd: &storev1.Command_RevokeToken{RevokeToken: &storev1.RevokeToken{Id: revokedID}}}); res.Err != nil {
		t.Fatalf("revoke: %v", res.Err)
	}
	expired := mint("brief", func(tok *managerv1.ApiToken) { tok.ExpiresAt = timestamppb.New(t0) })
	goodID, _, _ := ParseToken(good)
	unknown := NewToken()
	a, err := NewAuthorizer(func() *state.Read { return st.Snapshot() }, Options{Clock: clk, RateLimit: 100})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		cred    string
		wantErr string // "" accepts
		catchUp bool   // refused as a credential a catch-up might make known
	}{
		{name: "Good", cred: good},
		{name: "Unknown", cred: unknown, wantErr: "unknown API token", catchUp: true},
		{name: "WrongSecret", cred: good[:len(good)-1] + flip(good[len(good)-1]), wantErr: "unknown API token"},
		{name: "NoSecret", cred: APITokenPrefix + goodID, wantErr: "unknown API token"},
		{name: "ShortSecret", cred: APITokenPrefix + goodID + ".abc", wantErr: "unknown API token"},
		{name: "ShortID", cred: APITokenPrefix + "ab." + strings.Repeat("0", 64), wantErr: "unknown API token"},
		{name: "JustThePrefix", cred: APITokenPrefix, wantErr: "unknown API token"},
		{name: "Revoked", cred: revoked, wantErr: "API token " + revokedID + " (gone) has been revoked"},
		{name: "Expired", cred: expired, wantErr: "(brief) expired at 2026-03-01T12:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := a.Authenticate(BearerPrefix + tc.cred)
			if tc.wantErr == "" {
				if err != nil || id.TokenID != goodID || id.Role != state.RoleOperator || id.Name != "token:good/"+goodID || id.Key != "t:"+goodID {
					t.Fatalf("Authenticate = %+v, %v; want the good token's identity", id, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Authenticate accepted %q as %+v", tc.cred, id)
			}
			if !apierr.Is(err, apierr.Unauthenticated) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Authenticate = %v; want UNAUTHENTICATED %q", err, tc.wantErr)
			}
			if got := errors.As(err, new(unknownCredential)); got != tc.catchUp {
				t.Errorf("refused as a credential to catch up on = %v, want %v", got, tc.catchUp)
			}
			if _, secret, ok := strings.Cut(tc.cred, "."); ok && len(secret) >= 8 && strings.Contains(err.Error(), secret) {
				t.Errorf("the refusal %q repeats the token's secret", err)
			}
		})
	}
}

// flip changes a hex digit.
func flip(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}
