package norsk

import (
	"context"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
)

// ConsistencyHeader is the request header that asks a Manager member for a
// linearizable read, with the value "linearizable": the member answers only
// after it has applied everything the primary had committed when the call
// arrived (the primary confirming first that it still leads). Without it a
// read is served from the member's own copy, which on a follower may trail
// the primary by a few milliseconds. Settings.LinearizableReads and
// Linearizable set it.
const ConsistencyHeader = "Norsk-Consistency"

// linearizableValue is ConsistencyHeader's value for a linearizable read.
const linearizableValue = "linearizable"

// linearizableReads are the calls that read the replicated state, the ones
// a linearizable read applies to. The rest are writes (linearizable
// already: they commit through the primary), or are answered by the member
// called from its own view (Hello, Version, GetStoreInfo, SnapshotSave,
// GetClusterStatus, GetClusterEvents, and the cluster recovery calls, which
// must work without a primary), or are the event stream, which follows the
// store live.
var linearizableReads = map[string]bool{
	managerv1connect.ManagerJobByIdProcedure:           true,
	managerv1connect.ManagerJobSearchProcedure:         true,
	managerv1connect.ManagerListClusterNodesProcedure:  true,
	managerv1connect.ManagerListNodesProcedure:         true,
	managerv1connect.ManagerGetNodeIdleExpiryProcedure: true,
	managerv1connect.ManagerGetAuditLogProcedure:       true,
	managerv1connect.ManagerKvGetProcedure:             true,
	managerv1connect.ManagerKvListProcedure:            true,
	managerv1connect.ManagerListTokensProcedure:        true,
	managerv1connect.ManagerGetDiscoveryFleetProcedure: true,
}

type linearizableKey struct{}

// Linearizable returns ctx marked so that a read of the replicated state
// made with it — JobById, JobSearch, JobSearchWithIndex, ListNodes,
// ListClusterNodes, GetNodeIdleExpiry, GetAuditLog, VerifyAuditLog, KvGet,
// KvList, ListTokens, GetDiscoveryFleet — is linearizable (see
// ConsistencyHeader): it sees every write committed before it began, on
// whichever member it is served. Such a read costs a round trip to the
// primary and fails with ErrUnavailable when there is none. Other calls
// ignore the mark. Settings.LinearizableReads does the same for every read.
func Linearizable(ctx context.Context) context.Context {
	return context.WithValue(ctx, linearizableKey{}, true)
}

// consistency is the interceptor that sets ConsistencyHeader on the reads
// that ask for it (every read when all is set).
type consistency struct{ all bool }

func (c consistency) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if linearizableReads[req.Spec().Procedure] && (c.all || ctx.Value(linearizableKey{}) != nil) {
			req.Header().Set(ConsistencyHeader, linearizableValue)
		}
		return next(ctx, req)
	}
}

func (c consistency) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c consistency) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
