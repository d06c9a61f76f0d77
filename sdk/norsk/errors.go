package norsk

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
)

// Sentinel errors, one per status code of the wire protocol. Every error a
// Manager method returns matches exactly one of them under errors.Is; use
// errors.As with *Error for the code and the server's message.
var (
	// ErrCanceled: the caller's context was cancelled.
	ErrCanceled = errors.New("canceled")
	// ErrUnknown: an error the server did not classify.
	ErrUnknown = errors.New("unknown error")
	// ErrInvalidArgument: malformed input; the message names the field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrDeadlineExceeded: the call's deadline passed before it completed.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
	// ErrNotFound: an unknown job, node or cluster slot.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a create of something that exists (e.g. a job id).
	ErrAlreadyExists = errors.New("already exists")
	// ErrPermissionDenied: the token's role may not make this call.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrResourceExhausted: a limit was hit, e.g. an event-stream consumer
	// that fell too far behind.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrFailedPrecondition: the store's state forbids the call (a stale job
	// hash, an offline node, a terminal job, …).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrAborted: the call conflicted with a concurrent one; retrying may
	// succeed.
	ErrAborted = errors.New("aborted")
	// ErrOutOfRange: a value outside the range the server accepts.
	ErrOutOfRange = errors.New("out of range")
	// ErrUnimplemented: the daemon does not implement the call (an older
	// daemon).
	ErrUnimplemented = errors.New("unimplemented")
	// ErrInternal: a server bug.
	ErrInternal = errors.New("internal error")
	// ErrUnavailable: the Manager (or its primary) cannot be reached now;
	// retrying later may succeed.
	ErrUnavailable = errors.New("unavailable")
	// ErrDataLoss: unrecoverable data loss or corruption.
	ErrDataLoss = errors.New("data loss")
	// ErrUnauthenticated: a missing or bad API token, or an unknown
	// registration token.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrIncompatible: the daemon speaks a wire protocol whose major version
	// differs from ProtocolVersion. Returned by Connect as an
	// *IncompatibleError.
	ErrIncompatible = errors.New("incompatible protocol version")
)

// codeErrors is the one table from status codes to sentinel errors.
var codeErrors = map[connect.Code]error{
	connect.CodeCanceled:           ErrCanceled,
	connect.CodeUnknown:            ErrUnknown,
	connect.CodeInvalidArgument:    ErrInvalidArgument,
	connect.CodeDeadlineExceeded:   ErrDeadlineExceeded,
	connect.CodeNotFound:           ErrNotFound,
	connect.CodeAlreadyExists:      ErrAlreadyExists,
	connect.CodePermissionDenied:   ErrPermissionDenied,
	connect.CodeResourceExhausted:  ErrResourceExhausted,
	connect.CodeFailedPrecondition: ErrFailedPrecondition,
	connect.CodeAborted:            ErrAborted,
	connect.CodeOutOfRange:         ErrOutOfRange,
	connect.CodeUnimplemented:      ErrUnimplemented,
	connect.CodeInternal:           ErrInternal,
	connect.CodeUnavailable:        ErrUnavailable,
	connect.CodeDataLoss:           ErrDataLoss,
	connect.CodeUnauthenticated:    ErrUnauthenticated,
}

// Error is the error every Manager method returns: the status code, the
// server's message and the RPC that failed. It matches the sentinel error of
// its code under errors.Is, and unwraps to the transport's error (so that
// errors.Is(err, context.Canceled) also holds when the caller cancelled).
type Error struct {
	// Op is the RPC that failed, e.g. "StartJob".
	Op string
	// Code is the gRPC status code.
	Code connect.Code
	// Message is the server's message (or the transport's, for a call that
	// never reached the server).
	Message string

	cause error
}

// Error returns "Op: code: message".
func (e *Error) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("%s: %s", CodeName(e.Code), e.Message)
	}
	return fmt.Sprintf("%s: %s: %s", e.Op, CodeName(e.Code), e.Message)
}

// CodeName is the gRPC name of a code, as the seed writes them
// (FAILED_PRECONDITION, NOT_FOUND, CANCELLED, …).
func CodeName(c connect.Code) string {
	if c == connect.CodeCanceled {
		return "CANCELLED"
	}
	return strings.ToUpper(c.String())
}

// Is reports whether target is the sentinel error of e's code.
func (e *Error) Is(target error) bool {
	s, ok := codeErrors[e.Code]
	return ok && s == target
}

// Unwrap returns the underlying transport error.
func (e *Error) Unwrap() error { return e.cause }

// wrapError turns an error of a connect call into an *Error for op. nil stays
// nil.
func wrapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return &Error{Op: op, Code: codeOf(err), Message: msg, cause: err}
}

// codeOf is the status code of err: its own when it carries one, Canceled or
// DeadlineExceeded for a context's error, Unknown otherwise.
func codeOf(err error) connect.Code {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeUnknown
}

// IncompatibleError is Connect's refusal of a daemon whose wire-protocol
// major version differs from the SDK's. It matches ErrIncompatible.
type IncompatibleError struct {
	// SDKVersion is ProtocolVersion; DaemonVersion is what the daemon sent.
	SDKVersion, DaemonVersion string
	// DaemonBuild is the daemon's build label.
	DaemonBuild string
}

// Error names both versions.
func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("incompatible Manager: daemon speaks wire protocol %s (build %q), this SDK speaks %s; the major versions must match",
		e.DaemonVersion, e.DaemonBuild, e.SDKVersion)
}

// Is reports whether target is ErrIncompatible.
func (e *IncompatibleError) Is(target error) bool { return target == ErrIncompatible }
