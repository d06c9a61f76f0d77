package apiauth

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// TestBuildTable: every RPC of the served services says who may call it.
func TestBuildTable(t *testing.T) {
	t.Parallel()
	tab, err := BuildTable()
	if err != nil {
		t.Fatal(err)
	}
	if len(tab[managerv1connect.ManagerHelloProcedure]) == 0 || len(tab[managerv1connect.ManagerCreateJobProcedure]) == 0 {
		t.Fatalf("table lacks Hello or CreateJob: %v", tab)
	}
}

func TestCan(t *testing.T) {
	t.Parallel()
	for _, r := range jobspec.Roles {
		if len(rolePermissions[r]) == 0 {
			t.Errorf("role %s holds no permission", r)
		}
	}
	tab, err := BuildTable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		role, procedure string
		want            bool
	}{
		{jobspec.RoleAdmin, managerv1connect.ManagerCreateTokenProcedure, true},
		{jobspec.RoleOperator, managerv1connect.ManagerCreateJobProcedure, true},
		{jobspec.RoleOperator, managerv1connect.ManagerCreateTokenProcedure, false},
		{jobspec.RoleReadOnly, managerv1connect.ManagerJobSearchProcedure, true},
		{jobspec.RoleReadOnly, managerv1connect.ManagerCreateJobProcedure, false},
		{jobspec.RolePublisher, managerv1connect.ManagerJobSearchProcedure, false},
		{RoleMember, managerv1connect.ManagerCreateJobProcedure, false},
		{"nobody", managerv1connect.ManagerHelloProcedure, false},
	}
	for _, tt := range tests {
		if got := Can(tt.role, tab[tt.procedure]...); got != tt.want {
			t.Errorf("Can(%s, %s) = %v; want %v", tt.role, MethodName(tt.procedure), got, tt.want)
		}
	}
}

func TestDenied(t *testing.T) {
	t.Parallel()
	err := Denied("token:ci/ab12", jobspec.RoleReadOnly, managerv1connect.ManagerCreateJobProcedure,
		[]managerv1.Permission{managerv1.Permission_PERMISSION_OPERATE})
	if apierr.CodeOf(err) != apierr.PermissionDenied {
		t.Errorf("code %v; want PermissionDenied", apierr.CodeOf(err))
	}
	if want := "token:ci/ab12 (role read-only) may not call CreateJob (it needs operate)"; err.Error() != want {
		t.Errorf("message %q; want %q", err.Error(), want)
	}
}

// TestTokenRefusal: a revoked token is refused whatever its expiry, an
// expired one from its expiry on (the instant included), each naming the
// token; a good one is not.
func TestTokenRefusal(t *testing.T) {
	t.Parallel()
	exp := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tok := func(revoked bool, expires bool) *managerv1.ApiToken {
		t := &managerv1.ApiToken{Id: "0123456789abcdef", Name: "ci", Revoked: revoked}
		if expires {
			t.ExpiresAt = timestamppb.New(exp)
		}
		return t
	}
	tests := []struct {
		name string
		tok  *managerv1.ApiToken
		now  time.Time
		want string // "" accepts
	}{
		{"NeverExpires", tok(false, false), exp.Add(100 * 365 * 24 * time.Hour), ""},
		{"BeforeExpiry", tok(false, true), exp.Add(-time.Nanosecond), ""},
		{"AtExpiry", tok(false, true), exp, "API token 0123456789abcdef (ci) expired at 2026-03-01T12:00:00Z"},
		{"AfterExpiry", tok(false, true), exp.Add(time.Hour), "API token 0123456789abcdef (ci) expired at 2026-03-01T12:00:00Z"},
		{"Revoked", tok(true, false), exp, "API token 0123456789abcdef (ci) has been revoked"},
		{"RevokedBeforeExpiry", tok(true, true), exp.Add(-time.Hour), "API token 0123456789abcdef (ci) has been revoked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := TokenRefusal(tc.tok, tc.now)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("TokenRefusal = %v, want nil", err)
				}
				return
			}
			if !apierr.Is(err, apierr.Unauthenticated) || err.Error() != tc.want {
				t.Errorf("TokenRefusal = %v, want UNAUTHENTICATED %q", err, tc.want)
			}
		})
	}
}
