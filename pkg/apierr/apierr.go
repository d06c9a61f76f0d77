// Package apierr holds the Manager's domain errors: a code saying what kind of
// refusal an error is, and a message saying what was wrong. Every layer (the
// FSM, the handlers, the node controller) returns these; the API layer turns
// the code into a gRPC status through the one table here (GRPCCode), and the
// SDK maps the status back to a typed Go error.
//
// It is public (decision 0045) so that the SDK's fake Manager
// (sdk/norsk/norsktest) refuses with the very codes and messages the Manager
// does, from the same code.
//
// The package is pure: no I/O, no clock, safe to use from the FSM.
package apierr

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Code is the kind of a domain error. The names follow the gRPC codes they
// map to.
type Code int

// Codes. The zero value is Internal so that a forgotten code never reads as a
// caller's mistake.
const (
	Internal Code = iota
	InvalidArgument
	NotFound
	AlreadyExists
	FailedPrecondition
	Unauthenticated
	PermissionDenied
	ResourceExhausted
	Unavailable
	Aborted
	DeadlineExceeded
	DataLoss
)

var codeNames = map[Code]string{
	Internal:           "INTERNAL",
	InvalidArgument:    "INVALID_ARGUMENT",
	NotFound:           "NOT_FOUND",
	AlreadyExists:      "ALREADY_EXISTS",
	FailedPrecondition: "FAILED_PRECONDITION",
	Unauthenticated:    "UNAUTHENTICATED",
	PermissionDenied:   "PERMISSION_DENIED",
	ResourceExhausted:  "RESOURCE_EXHAUSTED",
	Unavailable:        "UNAVAILABLE",
	Aborted:            "ABORTED",
	DeadlineExceeded:   "DEADLINE_EXCEEDED",
	DataLoss:           "DATA_LOSS",
}

// grpcCodes is the one table from domain codes to gRPC status codes (the
// numbers of google.rpc.Code, which connect.Code shares).
var grpcCodes = map[Code]uint32{
	Internal:           13,
	InvalidArgument:    3,
	NotFound:           5,
	AlreadyExists:      6,
	FailedPrecondition: 9,
	Unauthenticated:    16,
	PermissionDenied:   7,
	ResourceExhausted:  8,
	Unavailable:        14,
	Aborted:            10,
	DeadlineExceeded:   4,
	DataLoss:           15,
}

// GRPCCode is the gRPC status code a refusal of code c is answered with
// (connect.Code(c.GRPCCode())); an unknown code is INTERNAL (13).
func (c Code) GRPCCode() uint32 {
	if n, ok := grpcCodes[c]; ok {
		return n
	}
	return 13
}

// String is the gRPC name of the code.
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// ParseCode is the inverse of String; unknown names are Internal.
func ParseCode(name string) Code {
	for c, n := range codeNames {
		if n == name {
			return c
		}
	}
	return Internal
}

// Error is a domain error.
type Error struct {
	Code Code
	// Field names the offending input field for InvalidArgument, using the
	// API's JSON path (e.g. "job.services[1].name"); may be empty.
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Msg
	}
	return e.Msg
}

// Is makes errors.Is(err, &Error{Code: c}) match any error of code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Field == "" && t.Code == e.Code
}

// New makes an error of the given code.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Invalid makes an InvalidArgument error naming a field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: InvalidArgument, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// NotFoundf, FailedPreconditionf, … are shorthands for New.
func NotFoundf(format string, args ...any) *Error { return New(NotFound, format, args...) }

// FailedPreconditionf makes a FailedPrecondition error.
func FailedPreconditionf(format string, args ...any) *Error {
	return New(FailedPrecondition, format, args...)
}

// AlreadyExistsf makes an AlreadyExists error.
func AlreadyExistsf(format string, args ...any) *Error { return New(AlreadyExists, format, args...) }

// Unauthenticatedf makes an Unauthenticated error.
func Unauthenticatedf(format string, args ...any) *Error {
	return New(Unauthenticated, format, args...)
}

// Unavailablef makes an Unavailable error.
func Unavailablef(format string, args ...any) *Error { return New(Unavailable, format, args...) }

// MaxQuoted is the most bytes of a caller's value that Quote keeps.
const MaxQuoted = 64

// Quote renders a caller's value for an error message: Go-quoted (control
// characters escaped) and, when longer than MaxQuoted bytes, cut at a rune
// boundary, marked with "…" and followed by its full length, so a refusal
// never echoes a huge or hostile value back whole.
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// CodeOf returns the code of the first *Error in err's chain, Internal if none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Is reports whether err carries the given code.
func Is(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// RefusalHeader is the response metadata key that names, for a program to
// act on, why a credential was refused (the message is for people and may
// change): RefusalNodeSecretUnknown tells a worker its slot is gone;
// RefusalNodeHeldByLiveWorker that another process of its node holds the
// node's live stream (one worker process per node identity).
const (
	RefusalHeader               = "Norsk-Refusal"
	RefusalNodeSecretUnknown    = "node-secret-unknown"
	RefusalNodeHeldByLiveWorker = "node-held-by-live-worker"
)
