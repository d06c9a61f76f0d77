// Package apiauth says who may call what on the Manager API: the
// permissions each RPC allows (the `allow` option of the service
// descriptors) and the permissions each role holds. The Manager's
// authorizer and the SDK's fake (norsktest) decide with it, so a program
// tested against the fake meets the same refusals as against a Manager.
//
// The package is pure (no I/O, no clock) and its tables are read-only once
// built: safe for concurrent use.
package apiauth

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Roles a credential may have beyond the API tokens' (jobspec.Roles).
const (
	// RoleMember is another member of the cluster (the Members service).
	RoleMember = "member"
	// RoleHostAgent is a host agent presenting its registration token.
	RoleHostAgent = "host-agent"
)

// rolePermissions says what each role may do.
var rolePermissions = map[string][]managerv1.Permission{
	jobspec.RoleAdmin: {
		managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_READ, managerv1.Permission_PERMISSION_OPERATE,
		managerv1.Permission_PERMISSION_ADMIN, managerv1.Permission_PERMISSION_PUBLISH, managerv1.Permission_PERMISSION_REGISTER,
		managerv1.Permission_PERMISSION_CLUSTER,
	},
	RoleMember:           {managerv1.Permission_PERMISSION_MEMBER},
	jobspec.RoleOperator: {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_READ, managerv1.Permission_PERMISSION_OPERATE},
	jobspec.RoleReadOnly: {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_READ},
	jobspec.RoleWorker:   {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_REGISTER},
	// A host agent registering: RegisterHostAgent only (the handler checks
	// the procedure's token is the host's).
	RoleHostAgent:         {managerv1.Permission_PERMISSION_REGISTER},
	jobspec.RolePublisher: {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_PUBLISH},
}

// Can reports whether role holds any of perms (an unknown role holds none).
func Can(role string, perms ...managerv1.Permission) bool {
	for _, have := range rolePermissions[role] {
		for _, want := range perms {
			if have == want {
				return true
			}
		}
	}
	return false
}

// Table maps each procedure of the Manager and Members services
// ("/norsk.manager.v1.Manager/CreateJob") to the permissions that allow it.
type Table map[string][]managerv1.Permission

// Services are the services the API serves, by descriptor.
var Services = []protoreflect.ServiceDescriptor{
	managerv1.File_norsk_manager_v1_manager_proto.Services().ByName("Manager"),
	managerv1.File_norsk_manager_v1_cluster_proto.Services().ByName("Members"),
}

// BuildTable reads the services' descriptors. An RPC without an `allow`
// option is an error: a server refuses to start rather than serve a call
// nobody decided who may make.
func BuildTable() (Table, error) {
	t := Table{}
	var missing []string
	for _, svc := range Services {
		if svc == nil {
			return nil, errors.New("authz: a served service is missing from the descriptors")
		}
		methods := svc.Methods()
		for i := 0; i < methods.Len(); i++ {
			m := methods.Get(i)
			perms := MethodPermissions(m)
			if len(perms) == 0 {
				missing = append(missing, string(m.FullName()))
				continue
			}
			t["/"+string(svc.FullName())+"/"+string(m.Name())] = perms
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("authz: RPCs with no `allow` option (say who may call them in the .proto): %s", strings.Join(missing, ", "))
	}
	return t, nil
}

// MethodPermissions is the `allow` option of one RPC.
func MethodPermissions(m protoreflect.MethodDescriptor) []managerv1.Permission {
	opts, ok := m.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return nil
	}
	perms, _ := proto.GetExtension(opts, managerv1.E_Allow).([]managerv1.Permission)
	return perms
}

// Denied is the PERMISSION_DENIED refusal of a caller (who, as the audit
// log names it) whose role lacks every one of perms for procedure.
func Denied(who, role, procedure string, perms []managerv1.Permission) error {
	return apierr.New(apierr.PermissionDenied, "%s (role %s) may not call %s (it needs %s)",
		who, role, MethodName(procedure), PermissionWords(perms))
}

// TokenRefusal is the UNAUTHENTICATED refusal of a known API token that may
// no longer be used: revoked, or expired at or before now. It is nil for a
// token still good at now. The caller has checked the token's secret.
func TokenRefusal(tok *managerv1.ApiToken, now time.Time) error {
	if tok.GetRevoked() {
		return apierr.Unauthenticatedf("API token %s (%s) has been revoked", tok.GetId(), tok.GetName())
	}
	if exp := tok.GetExpiresAt(); exp != nil && !now.Before(exp.AsTime()) {
		return apierr.Unauthenticatedf("API token %s (%s) expired at %s", tok.GetId(), tok.GetName(), exp.AsTime().UTC().Format(time.RFC3339))
	}
	return nil
}

// PermissionWords names perms for a person ("read or operate").
func PermissionWords(perms []managerv1.Permission) string {
	words := make([]string, len(perms))
	for i, p := range perms {
		words[i] = strings.ToLower(strings.TrimPrefix(p.String(), "PERMISSION_"))
	}
	return strings.Join(words, " or ")
}

// MethodName is the method of a procedure ("/norsk.manager.v1.Manager/CreateJob" → "CreateJob").
func MethodName(procedure string) string {
	if i := strings.LastIndexByte(procedure, '/'); i >= 0 {
		return procedure[i+1:]
	}
	return procedure
}
