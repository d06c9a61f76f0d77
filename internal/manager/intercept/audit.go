// Package intercept is what every Manager API call passes through before
// its handler: the strict Connect JSON codec (unknown fields and enum names
// refused by path), the table of request field bounds, and the audit
// interceptor that puts the caller in the call's context for AuditStamp.
package intercept

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/auth"
	"github.com/norsk-go/norsk-manager/pkg/apiauth"
)

// callInfo is who made an API call and which; the audit interceptor puts it
// in the call's context, and apply stamps it into the command so the FSM
// records the call in the audit log in the same commit as its change.
type callInfo struct {
	// who is the caller and its address, for the payload of the call's
	// entry; caller and tokenID are the authenticated identity alone, which
	// the entry records in its own (hashed) fields.
	who     string
	caller  string
	tokenID string
	method  string
}

type callInfoKey struct{}

// AuditInterceptor records who calls what, for the audit log.
func AuditInterceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			ci := callInfo{who: callerIdentity(ctx, req), method: apiauth.MethodName(req.Spec().Procedure)}
			if id, ok := auth.CallerOf(ctx); ok {
				ci.caller, ci.tokenID = id.Name, id.TokenID
			}
			return next(context.WithValue(ctx, callInfoKey{}, ci), req)
		}
	}
}

// Who is the caller of the API call in ctx and its address, as its audit
// entry names it; ok is false outside an API call.
func Who(ctx context.Context) (who string, ok bool) {
	ci, ok := ctx.Value(callInfoKey{}).(callInfo)
	return ci.who, ok
}

// Caller is the authenticated identity of the API call in ctx ("" outside
// an authenticated call).
func Caller(ctx context.Context) string {
	ci, _ := ctx.Value(callInfoKey{}).(callInfo)
	return ci.caller
}

// callerIdentity names the caller: the identity its credential proved, and
// the address it called from ("token:ops-alice/1f2e… from 10.0.0.7:51234").
func callerIdentity(ctx context.Context, req connect.AnyRequest) string {
	who := auth.Anonymous
	if id, ok := auth.CallerOf(ctx); ok {
		who = id.Name
	}
	if a := req.Peer().Addr; a != "" {
		who += " from " + a
	}
	return who
}

// AuditStamp is the stamp for a command proposed on behalf of the call in
// ctx (nil outside an API call).
func AuditStamp(ctx context.Context, cmd *storev1.Command) *storev1.AuditStamp {
	ci, ok := ctx.Value(callInfoKey{}).(callInfo)
	if !ok {
		return nil
	}
	return &storev1.AuditStamp{Who: ci.who, Method: ci.method, Target: AuditTarget(cmd), Caller: ci.caller, CallerTokenId: ci.tokenID}
}

// AuditTarget names what a command acts on.
func AuditTarget(cmd *storev1.Command) string {
	switch c := cmd.GetCmd().(type) {
	case *storev1.Command_CreateJob:
		return "job/" + c.CreateJob.GetJob().GetJobId()
	case *storev1.Command_UpdateJob:
		return "job/" + c.UpdateJob.GetJob().GetJobId()
	case *storev1.Command_DeleteJob:
		return "job/" + c.DeleteJob.GetJobId()
	case *storev1.Command_BindInstance:
		return fmt.Sprintf("job/%s/%s@%s", c.BindInstance.GetJobId(), c.BindInstance.GetRole(), c.BindInstance.GetNodeId())
	case *storev1.Command_BindInstances:
		binds := c.BindInstances.GetBinds()
		if len(binds) == 1 {
			return fmt.Sprintf("job/%s/%s@%s", binds[0].GetJobId(), binds[0].GetRole(), binds[0].GetNodeId())
		}
		return fmt.Sprintf("jobs/%d instances", len(binds))
	case *storev1.Command_PutMigration:
		return "migration/" + c.PutMigration.GetMigration().GetMigrationId()
	case *storev1.Command_ForgetMigrations:
		return "migrations"
	case *storev1.Command_SetNodeDraining:
		return "node/" + c.SetNodeDraining.GetNodeId()
	case *storev1.Command_StartNodeDrain:
		return "node/" + c.StartNodeDrain.GetDrain().GetNodeId()
	case *storev1.Command_PutNodeDrain:
		return "node/" + c.PutNodeDrain.GetDrain().GetNodeId()
	case *storev1.Command_StopInstance:
		return fmt.Sprintf("job/%s/%s@%s", c.StopInstance.GetJobId(), c.StopInstance.GetRole(), c.StopInstance.GetNodeId())
	case *storev1.Command_StartPrepared:
		return fmt.Sprintf("job/%s/%s@%s", c.StartPrepared.GetJobId(), c.StartPrepared.GetRole(), c.StartPrepared.GetNodeId())
	case *storev1.Command_CompleteJob:
		return "job/" + c.CompleteJob.GetJobId()
	case *storev1.Command_ExpectMember:
		return "member/" + c.ExpectMember.GetName()
	case *storev1.Command_MemberRetired:
		return "member/" + c.MemberRetired.GetName()
	case *storev1.Command_MemberJoined:
		return "member/" + c.MemberJoined.GetName()
	case *storev1.Command_MarkJobFailed:
		return "job/" + c.MarkJobFailed.GetJobId()
	case *storev1.Command_RegisterSlot:
		return "node/" + c.RegisterSlot.GetNodeId()
	case *storev1.Command_MemberRegister:
		return "worker/" + c.MemberRegister.GetAddress()
	case *storev1.Command_DeregisterSlot:
		return "node/" + c.DeregisterSlot.GetNodeId()
	case *storev1.Command_SetSlotPool:
		return "node/" + c.SetSlotPool.GetNodeId()
	case *storev1.Command_TerminateNode:
		return "node/" + c.TerminateNode.GetNodeId()
	case *storev1.Command_SetNodeTags:
		return "node/" + c.SetNodeTags.GetNodeId()
	case *storev1.Command_SetNodeInstance:
		return "node/" + c.SetNodeInstance.GetNodeId()
	case *storev1.Command_SetNodeIdleExpiry:
		return "node/" + c.SetNodeIdleExpiry.GetNodeId()
	case *storev1.Command_KvCommit:
		return "kv/" + c.KvCommit.GetNamespace()
	case *storev1.Command_CreateBundle:
		return "bundle/" + c.CreateBundle.GetBundle().GetBundleId()
	case *storev1.Command_UpdateBundle:
		return "bundle/" + c.UpdateBundle.GetBundle().GetBundleId()
	case *storev1.Command_DeleteBundle:
		return "bundle/" + c.DeleteBundle.GetBundleId()
	case *storev1.Command_SetBundleJobDormant:
		return fmt.Sprintf("bundle/%s/%s/%d", c.SetBundleJobDormant.GetBundleId(), c.SetBundleJobDormant.GetJobName(), c.SetBundleJobDormant.GetReplicaIndex())
	case *storev1.Command_SetBundleStopTime:
		return "bundle/" + c.SetBundleStopTime.GetBundleId()
	case *storev1.Command_RenewBundleLease:
		return "bundle/" + c.RenewBundleLease.GetBundleId()
	case *storev1.Command_SetLeasesPaused:
		return "leases"
	case *storev1.Command_AppendAudit, *storev1.Command_PruneAudit:
		return "audit"
	case *storev1.Command_PublishDiscovery, *storev1.Command_RotateDiscovery:
		return "discovery" // never the fleet's secrets
	case *storev1.Command_PublishAccessReplica:
		return "access-replica"
	case *storev1.Command_AddHostAgent:
		return "host-agent/" + c.AddHostAgent.GetName() // never its token
	case *storev1.Command_RegisterHostAgent:
		return "host-agent/" + c.RegisterHostAgent.GetName() // never its secret
	case *storev1.Command_RemoveHostAgent:
		return "host-agent/" + c.RemoveHostAgent.GetName()
	}
	return ""
}
