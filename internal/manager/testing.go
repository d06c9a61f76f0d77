package manager

import (
	"context"

	"connectrpc.com/connect"
)

// NewToken makes a new admin-grade API token string ("nmt_<id>.<secret>")
// for Config.BootstrapToken: tests and dev mode choose their first token so
// they can use it.
func NewToken() string {
	_, bearer, _ := mintToken()
	return bearer
}

// WithBearer is a connect client option that sends token as the bearer of
// every call (for clients built on the generated code rather than the SDK).
func WithBearer(token string) connect.ClientOption {
	return connect.WithInterceptors(bearerInterceptor(token))
}

type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(authorizationHdr, bearerPrefix+string(b))
		return next(ctx, req)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set(authorizationHdr, bearerPrefix+string(b))
		return conn
	}
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
