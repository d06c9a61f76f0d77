//go:build writepathtrace

package store

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hashicorp/raft"
)

// On the primary raft hands the FSM and the log store the very bytes
// Apply proposed, so the first byte's address names a write from Apply to
// the FSM (it is only a key: nothing is read through it).
// Each time is in nanoseconds since start, stored atomically: a caller
// that gives up early reads them while raft may still write them.
type phaseTrace struct {
	start                              time.Time
	logStart, logEnd, fsmStart, fsmEnd atomic.Int64
}

func (t *phaseTrace) since() int64 { return int64(time.Since(t.start)) }

var (
	traces   sync.Map // *byte -> *phaseTrace
	phaseSum [5]atomic.Int64
	phaseN   atomic.Int64
)

// Phases is the mean of each phase over the writes traced so far.
func Phases() PhaseTimes {
	n := phaseN.Load()
	if n == 0 {
		return PhaseTimes{}
	}
	m := func(i int) time.Duration { return time.Duration(phaseSum[i].Load() / n) }
	return PhaseTimes{Proposals: n, ToLogWrite: m(0), LogWrite: m(1), ToFSM: m(2), FSM: m(3), Back: m(4)}
}

type proposalTrace struct {
	key *byte
	t   *phaseTrace
}

func traceProposal(data []byte) proposalTrace {
	p := proposalTrace{key: unsafe.SliceData(data), t: &phaseTrace{start: time.Now()}}
	traces.Store(p.key, p.t)
	return p
}

// done counts a write that went through every phase.
func (p proposalTrace) done() {
	traces.Delete(p.key)
	t := p.t
	end := t.since()
	ls, le, fs, fe := t.logStart.Load(), t.logEnd.Load(), t.fsmStart.Load(), t.fsmEnd.Load()
	if ls == 0 || fe == 0 {
		return
	}
	for i, d := range []int64{ls, le - ls, fs - le, fe - fs, end - fe} {
		phaseSum[i].Add(d)
	}
	phaseN.Add(1)
}

type logWriteTrace struct {
	logs  []*raft.Log
	start time.Time
}

func traceLogWrite(logs []*raft.Log) logWriteTrace {
	return logWriteTrace{logs: logs, start: time.Now()}
}

func (w logWriteTrace) done() {
	end := time.Now()
	for _, l := range w.logs {
		if len(l.Data) == 0 {
			continue
		}
		if v, ok := traces.Load(unsafe.SliceData(l.Data)); ok {
			t := v.(*phaseTrace)
			t.logStart.Store(int64(w.start.Sub(t.start)))
			t.logEnd.Store(int64(end.Sub(t.start)))
		}
	}
}

type fsmTrace struct{ t *phaseTrace }

func traceFSM(data []byte) fsmTrace {
	if len(data) == 0 {
		return fsmTrace{}
	}
	v, ok := traces.Load(unsafe.SliceData(data))
	if !ok {
		return fsmTrace{}
	}
	t := v.(*phaseTrace)
	t.fsmStart.Store(t.since())
	return fsmTrace{t: t}
}

func (f fsmTrace) done() {
	if f.t != nil {
		f.t.fsmEnd.Store(f.t.since())
	}
}
