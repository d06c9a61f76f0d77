// Package rpcerr turns the errors a Manager API handler meets into the
// connect status its caller sees, by pkg/apierr's one table of codes.
package rpcerr

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// ToConnect turns any error a handler meets into the status the caller
// sees: domain errors by apierr's one table (Code.GRPCCode), context errors as such, and anything
// else as INTERNAL (its text kept, so an operator can read it).
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	var de *apierr.Error
	if errors.As(err, &de) {
		return connect.NewError(connect.Code(de.Code.GRPCCode()), errors.New(err.Error()))
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}
