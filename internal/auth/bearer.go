package auth

import (
	"context"

	"connectrpc.com/connect"
)

// WithBearer is a connect client option that sends token as the bearer of
// every call (for clients built on the generated code rather than the SDK).
func WithBearer(token string) connect.ClientOption {
	return connect.WithInterceptors(bearerInterceptor(token))
}

type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(AuthorizationHeader, BearerPrefix+string(b))
		return next(ctx, req)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set(AuthorizationHeader, BearerPrefix+string(b))
		return conn
	}
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
