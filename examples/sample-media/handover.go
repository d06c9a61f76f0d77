package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

// The sample job's side of the job socket (see the package comment for the
// payloads): as a source it hands over its output position and clock and
// stops at a cut point a lead in the future; as a target it stays silent
// until it is told where the source stopped, then continues the source's
// stream and clock from there, its first frame in the slot the source's next
// frame would have had.

// position is where a stream is and its output clock: the next frame's
// sequence number, the wall-clock time of that frame's slot (unix
// nanoseconds, as the writer's wall clock read at AsOfUnixNano) and the
// frame rate, so that frame n's slot is NextDueUnixNano +
// (n-NextSeq)/FrameRate seconds on any host whose wall clock agrees. It is
// the payload of state (get_state's answer), initial_state, stopped_output
// and apply_from. Each side paces on its own monotonic clock and converts
// at the payload (jobsocket.WallUnixNano, jobsocket.LocalTime), so a step of
// either wall clock outside the handover moves nothing.
type position struct {
	NextSeq         uint64  `json:"nextSeq"`
	NextDueUnixNano int64   `json:"nextDueUnixNano"`
	FrameRate       float64 `json:"frameRate"`
	// AsOfUnixNano is when the writer wrote it, on its wall clock. A reader
	// on another host learns from it the relay's delay plus the clocks'
	// skew (negative: its own clock is behind the writer's by at least that).
	AsOfUnixNano int64 `json:"asOfUnixNano,omitempty"`
}

// readyInfo is the payload of the target's ready (the source reads nothing
// of it: it picks its own cut).
type readyInfo struct {
	FrameRate float64 `json:"frameRate"`
	Node      string  `json:"node,omitempty"`
}

// applySummary is the payload of applied, as the Manager reads it.
type applySummary struct {
	Applied []string       `json:"applied"`
	Failed  []applyFailure `json:"failed"`
	SkewMs  float64        `json:"skewMs"`
}

type applyFailure struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// appliedFrames is the one thing the sample job applies.
const appliedFrames = "frames"

// applyWait is how long past the first frame's due time the apply's answer
// waits for that frame to go out.
const applyWait = 2 * time.Second

// readySender is what the handover needs of its session.
type readySender interface {
	Ready(migrationID string, payload []byte) error
}

// handover implements jobsocket.Handler over the stream's output.
type handover struct {
	out  *output
	cfg  config
	log  *slog.Logger
	lead time.Duration

	mu   sync.Mutex
	sess readySender
	// target is the migration this process was started as the target of
	// ("" none); targetAborted once that migration was aborted (the
	// process then stays silent until the worker stops it).
	target        string
	targetAborted bool
	// appliedID and appliedSummary answer a repeated apply.
	appliedID      string
	appliedSummary []byte
}

var _ jobsocket.Handler = (*handover)(nil)

func newHandover(out *output, cfg config, log *slog.Logger) *handover {
	h := &handover{out: out, cfg: cfg, log: log, lead: cfg.CutoverLead}
	if cfg.handoverTarget() {
		h.target = cfg.MigrationID
	}
	return h
}

func (h *handover) setSession(s readySender) {
	h.mu.Lock()
	h.sess = s
	h.mu.Unlock()
}

// serve dials the job socket (again and again until it answers) and runs
// the session until ctx ends.
func (h *handover) serve(ctx context.Context, path string) {
	backoff := 100 * time.Millisecond
	for {
		s, err := jobsocket.Dial(ctx, path, jobsocket.WithClient("sample-media"), jobsocket.WithLogger(h.log))
		if err == nil {
			h.setSession(s)
			if err := s.Run(ctx, h); err != nil {
				h.log.Error("the job socket refused this job; handovers are off", "err", err)
			}
			_ = s.Close()
			return
		}
		h.log.Warn("cannot dial the job socket yet", "path", path, "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// OnAttached learns from hello_ack whether this process is a handover's
// target. One started as a target that the worker no longer calls one (its
// handover was applied before this process was restarted) starts output
// on its own clock.
func (h *handover) OnAttached(_ context.Context, id jobsocket.Identity) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case id.Handover && id.MigrationID != h.appliedID:
		if !h.out.isHolding() && h.target != id.MigrationID {
			h.log.Warn("the worker calls this instance a handover's target, but it was not started as one and is already sending",
				"migration_id", id.MigrationID)
		}
		if h.target != id.MigrationID {
			h.target, h.targetAborted = id.MigrationID, false
		}
	case !id.Handover && h.target != "" && !h.targetAborted && h.appliedID == "":
		if h.out.release(time.Now()) {
			h.log.Info("not a handover's target any more: starting output", "migration_id", h.target)
		}
	}
}

// OnInitialState answers ready: the sample job can start at once.
func (h *handover) OnInitialState(_ context.Context, id string, payload []byte) {
	var src position
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &src); err != nil {
			h.log.Warn("the source's state is not a position; starting from where the source stops anyway", "err", err)
		}
	}
	h.mu.Lock()
	if h.targetAborted && h.target == id || h.appliedID == id {
		h.mu.Unlock()
		return
	}
	h.target = id
	sess := h.sess
	h.mu.Unlock()
	h.log.Info("migration target: handed the source's state", "migration_id", id, "source_next_seq", src.NextSeq, "source_frame_rate", src.FrameRate)
	ready, _ := json.Marshal(readyInfo{FrameRate: h.cfg.FrameRate, Node: h.cfg.NodeID})
	if sess == nil {
		return
	}
	if err := sess.Ready(id, ready); err != nil {
		h.log.Warn("could not send ready (it goes again with the next initial state)", "err", err)
	}
}

// OnGetState answers the stream's position; a target that has not started
// output has none to hand over.
func (h *handover) OnGetState(_ context.Context, id string) ([]byte, string) {
	if h.out.isHolding() {
		return nil, "a migration target that has not started output"
	}
	p := h.out.position(time.Now())
	h.log.Info("migration source: asked for the state", "migration_id", id, "next_seq", p.NextSeq)
	b, _ := json.Marshal(p)
	return b, ""
}

// OnStopOutputAt picks the cut a lead in the future and answers at once;
// output goes on until just before it.
func (h *handover) OnStopOutputAt(_ context.Context, id string, _ []byte) ([]byte, error) {
	if h.out.isHolding() {
		return nil, errors.New("this instance has not started output: it has nothing to stop")
	}
	p := h.out.cutAt(id, h.lead, time.Now())
	h.log.Info("migration source: stopping output", "migration_id", id, "next_seq", p.NextSeq,
		"due", time.Unix(0, p.NextDueUnixNano).UTC().Format(time.RFC3339Nano), "lead", h.lead)
	b, _ := json.Marshal(p)
	return b, nil
}

// OnApplyFrom starts output at the source's cut, on the source's clock, and
// answers once the first frame has gone out (with how late it went).
func (h *handover) OnApplyFrom(ctx context.Context, id string, payload []byte) ([]byte, error) {
	h.mu.Lock()
	if h.appliedID == id {
		s := h.appliedSummary
		h.mu.Unlock()
		return s, nil
	}
	if h.targetAborted && h.target == id {
		h.mu.Unlock()
		return nil, fmt.Errorf("migration %s was aborted", id)
	}
	h.mu.Unlock()
	var p position
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("the source's stopped_output is not a position: %w", err)
	}
	if p.NextDueUnixNano <= 0 || p.FrameRate < 0 || math.IsNaN(p.FrameRate) || p.FrameRate > maxFrameRate {
		return nil, fmt.Errorf("the source's stopped_output %s is not a usable position", payload)
	}
	now := time.Now()
	first, ok := h.out.apply(p, now)
	if !ok {
		return nil, errors.New("this instance is already sending output")
	}
	due := jobsocket.LocalTime(p.NextDueUnixNano, now)
	attrs := []any{"migration_id", id, "next_seq", p.NextSeq,
		"due", due.UTC().Format(time.RFC3339Nano), "in", due.Sub(now).Round(time.Microsecond)}
	if p.AsOfUnixNano > 0 {
		// The relay's delay plus the hosts' clock skew; negative only when
		// this host's wall clock is behind the source's.
		attrs = append(attrs, "since_source_wrote", now.Sub(time.Unix(0, p.AsOfUnixNano)).Round(time.Microsecond))
	}
	h.log.Info("migration target: starting output", attrs...)
	if p.AsOfUnixNano > now.UnixNano() {
		h.log.Warn("this host's wall clock is behind the source's: the cutover is off by at least the skew",
			"migration_id", id, "skew_at_least", time.Unix(0, p.AsOfUnixNano).Sub(now.Round(0)))
	}

	sum := applySummary{Applied: []string{appliedFrames}, Failed: []applyFailure{}}
	t := time.NewTimer(max(time.Until(due), 0) + applyWait)
	defer t.Stop()
	select {
	case <-first:
		sum.SkewMs = math.Round(float64(h.out.firstSent().Sub(due))/float64(time.Microsecond)) / 1000
	case <-t.C:
		sum = applySummary{Applied: []string{}, Failed: []applyFailure{{ID: appliedFrames,
			Reason: fmt.Sprintf("frame %d was not sent within %s of its due time", p.NextSeq, applyWait)}}}
	case <-ctx.Done():
		return nil, fmt.Errorf("the job socket stream ended before the first frame went out: %w", ctx.Err())
	}
	b, _ := json.Marshal(sum)
	h.mu.Lock()
	h.appliedID, h.appliedSummary = id, b
	h.mu.Unlock()
	h.log.Info("migration target: applied", "migration_id", id, "skew_ms", sum.SkewMs)
	return b, nil
}

// OnAbort resumes a source's output; a target stays silent.
func (h *handover) OnAbort(_ context.Context, id, reason string) {
	if h.out.resume(id, time.Now()) {
		h.log.Info("migration aborted: resuming output", "migration_id", id, "reason", reason, "next_seq", h.out.nextSeq())
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target == id && h.appliedID != id {
		h.targetAborted = true
		h.log.Info("migration aborted: this target stays silent until it is stopped", "migration_id", id, "reason", reason)
		return
	}
	h.log.Info("ignoring an abort of a migration this job is not in", "migration_id", id)
}
