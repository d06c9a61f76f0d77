// Package ack is a worker's answer to a Manager command (CommandAck): the
// command was carried out, or it is refused with a gRPC code name and a
// message. The worker's instances, job sockets and agent all answer
// through it, so a refusal reads the same whichever part gave it.
package ack

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Refusal is a command's refusal: a gRPC code and a message.
type Refusal struct {
	Code connect.Code
	Msg  string
}

// Refuse returns the refusal with code and the formatted message.
func Refuse(code connect.Code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Error is the message.
func (e *Refusal) Error() string { return e.Msg }

// CodeName is the gRPC name of the code ("FAILED_PRECONDITION").
func (e *Refusal) CodeName() string { return strings.ToUpper(e.Code.String()) }

// Message is the acknowledgement of command seq: carried out when e is nil,
// else refused with e's code and message.
func Message(seq uint64, e *Refusal) *managerv1.WorkerMessage {
	a := &managerv1.CommandAck{Seq: seq}
	if e != nil {
		a.Error = e.Msg
		a.ErrorCode = e.CodeName()
	}
	return &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Ack{Ack: a}}
}
