package manager

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/internal/apierr"
)

// codes is the one table from domain error codes to gRPC codes.
var codes = map[apierr.Code]connect.Code{
	apierr.Internal:           connect.CodeInternal,
	apierr.InvalidArgument:    connect.CodeInvalidArgument,
	apierr.NotFound:           connect.CodeNotFound,
	apierr.AlreadyExists:      connect.CodeAlreadyExists,
	apierr.FailedPrecondition: connect.CodeFailedPrecondition,
	apierr.Unauthenticated:    connect.CodeUnauthenticated,
	apierr.PermissionDenied:   connect.CodePermissionDenied,
	apierr.ResourceExhausted:  connect.CodeResourceExhausted,
	apierr.Unavailable:        connect.CodeUnavailable,
	apierr.Aborted:            connect.CodeAborted,
	apierr.DeadlineExceeded:   connect.CodeDeadlineExceeded,
	apierr.DataLoss:           connect.CodeDataLoss,
}

// toConnect turns any error a handler meets into the status the caller
// sees: domain errors by the table, context errors as such, and anything
// else as INTERNAL (its text kept, so an operator can read it).
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	var de *apierr.Error
	if errors.As(err, &de) {
		return connect.NewError(codes[de.Code], errors.New(err.Error()))
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}
