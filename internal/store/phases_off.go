//go:build !writepathtrace

package store

import "github.com/hashicorp/raft"

// Phases is zero: the store was built without the writepathtrace tag.
func Phases() PhaseTimes { return PhaseTimes{} }

type proposalTrace struct{}

func traceProposal([]byte) proposalTrace { return proposalTrace{} }
func (proposalTrace) done()              {}

type logWriteTrace struct{}

func traceLogWrite([]*raft.Log) logWriteTrace { return logWriteTrace{} }
func (logWriteTrace) done()                   {}

type fsmTrace struct{}

func traceFSM([]byte) fsmTrace { return fsmTrace{} }
func (fsmTrace) done()         {}
