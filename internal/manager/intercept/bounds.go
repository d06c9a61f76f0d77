package intercept

import (
	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apibounds"
)

// requestBounds are the bounds of every field of every request the Manager
// and Members services take: apibounds.ManagerRequests, which the SDK's fake
// applies too (docs/api.md, "Field bounds", is this table).
var requestBounds = apibounds.ManagerRequests

// BoundsInterceptor refuses, with INVALID_ARGUMENT naming the field, any
// request with a field out of requestBounds, before its handler runs (a
// streaming call's messages as they are received).
func BoundsInterceptor() connect.Interceptor {
	return apibounds.Interceptor(requestBounds, rpcerr.ToConnect)
}
