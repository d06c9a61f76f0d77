package intercept

import (
	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/pkg/apibounds"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// Bounds of the API's numbers that have no other home (pkg/jobspec holds
// them, for the SDK's fake too).
const (
	// MaxIdleExpiry is the longest idle expiry SetNodeIdleExpiry takes.
	MaxIdleExpiry = jobspec.MaxIdleExpiry
	// MaxTokenTTL is the longest API token lifetime CreateToken takes.
	MaxTokenTTL = jobspec.MaxTokenTTL
	// MaxAnnounceInterval is the longest announcement interval.
	MaxAnnounceInterval = jobspec.MaxAnnounceInterval
	// MaxEpochMs is the last millisecond of year 9999.
	MaxEpochMs = jobspec.MaxEpochMs
	// MaxShmSizeBytes bounds a service's /dev/shm (1 TiB).
	MaxShmSizeBytes = jobspec.MaxShmSizeBytes
	// MaxSecretLen bounds tokens and secrets a caller presents.
	MaxSecretLen = jobspec.MaxSecretLen
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
