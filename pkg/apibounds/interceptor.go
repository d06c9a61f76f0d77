package apibounds

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
)

// Interceptor refuses, before its handler runs, any request with a field
// out of t (a streaming call's messages as they are received). toErr turns
// Check's apierr error into what the server answers (the Manager's and the
// fake's mapping to a connect error with the code's gRPC code). It is safe
// for concurrent use: a Table is read-only once built.
func Interceptor(t *Table, toErr func(error) error) connect.Interceptor {
	return interceptor{t: t, toErr: toErr}
}

type interceptor struct {
	t     *Table
	toErr func(error) error
}

// check applies the table to a request message (anything else passes).
func (i interceptor) check(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	if err := i.t.Check(pm); err != nil {
		return i.toErr(err)
	}
	return nil
}

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.check(req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, boundedConn{StreamingHandlerConn: conn, i: i})
	}
}

// boundedConn checks each message a streaming call receives.
type boundedConn struct {
	connect.StreamingHandlerConn
	i interceptor
}

func (c boundedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	return c.i.check(m)
}
