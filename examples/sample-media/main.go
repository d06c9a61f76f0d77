// Command sample-media is the sample media job: a stand-in for a live-video
// encoder that emits a numbered frame stream at a steady rate, so that tests
// and demos can see whether a job's output was interrupted, lost frames or
// duplicated them (for instance across a migration from one node to
// another). The record format is package frames; the sink command in
// ./sink receives a stream and prints its continuity.
//
// Frame n (counting from 0 at start) carries sequence number START_SEQ+n and
// is due at start + n/FRAME_RATE: frames are paced from the start time, so
// timing error does not accumulate. When the process falls more than a
// second behind (it was paused, say), it logs a warning and re-bases the
// schedule on the current frame instead of bursting to catch up; it never
// skips a sequence number, except a handover source's frames that missed
// their cut (below).
//
// On SIGTERM or SIGINT it finishes the frame it is sending, logs a stop line
// with the last sequence number sent (and the next one, for a successor's
// START_SEQ), and exits 0. It also exits 0 after FRAME_COUNT frames. It
// exits 1 when a file or stdout sink fails, and 2 on a bad configuration.
// A UDP sink is lossy by nature: send errors (no receiver yet, say) are
// counted and logged, and the stream goes on.
//
// Logs are log/slog text lines on stderr. Environment:
//
//	SINK          required. udp://host:port (one datagram per frame),
//	              file:///path (one record per frame appended to the file,
//	              created if absent), or - or stdout (records to stdout).
//	FRAME_RATE    frames per second, default 25; fractions allowed (29.97),
//	              at most 100000.
//	START_SEQ     sequence number of the first frame, default 0.
//	FRAME_COUNT   stop after this many frames; default 0 = run until signalled.
//	STREAM_ID     the stream id in every frame; default NORSK_JOB_ID, else
//	              "sample-media". At most 255 bytes.
//	NORSK_JOB_ID, NORSK_ROLE, NORSK_RUNTIME_ROLE, NORSK_NODE_ID
//	              set by the worker; logged, and the node and runtime role
//	              are the payload (see below).
//	NORSK_JOB_SOCKET
//	              set by a worker started with --job-socket: the job
//	              socket, over which the job takes part in handover
//	              migrations (below). Unset, the job behaves as above.
//	NORSK_MIGRATION_ID, NORSK_MIGRATION_HANDOVER
//	              set by the worker on a migration target; the second is "1"
//	              on a handover's target, which (with a job socket) sends
//	              nothing until it is applied. A target of another strategy
//	              starts as usual.
//	CUTOVER_LEAD  how far in the future a handover source cuts its output
//	              (a duration, "400ms", or milliseconds); default 400ms.
//	              It must exceed the time the Manager takes to relay the
//	              cut to the target, or the target starts late.
//	CUTOVER_PRIORITY
//	              the SCHED_FIFO priority (1-99) at which the two frames
//	              either side of a cut are paced; default 10; 0 = none.
//	              Without CAP_SYS_NICE (or off Linux) they are paced by
//	              waiting awake instead. See "Pacing at the cut" below.
//
// Every frame's payload is the text "node=<NORSK_NODE_ID> role=<NORSK_RUNTIME_ROLE>
// pid=<pid>" (truncated to frames.MaxPayloadLen), so a receiver can tell
// which instance sent which frames.
//
// # Handover
//
// With NORSK_JOB_SOCKET set the job attaches to its job socket
// (docs/job-socket.md) and hands its stream over without a lost or repeated
// frame, the target's first frame in the slot the source's next frame would
// have had. Its state is its output position and clock: the next sequence
// number, the time that frame's slot falls on the wall clock (unix
// nanoseconds, as the writer's wall clock read when it wrote the payload,
// asOfUnixNano) and the frame rate, as JSON:
//
//	{"nextSeq": 1250, "nextDueUnixNano": 1767225600040000000, "frameRate": 25,
//	 "asOfUnixNano": 1767225599640000000}
//
// Frame n's slot is nextDueUnixNano + (n-nextSeq)/frameRate seconds. Each
// instance paces on its own monotonic clock and converts at the payload
// (jobsocket.WallUnixNano writing, jobsocket.LocalTime reading), so a step
// of either host's wall clock outside the handover moves nothing, and the
// two hosts need only agree on the wall clock at the handover.
//
// As a source: get_state is answered with its current position. On
// stop_output_at it picks the cut, the first frame not yet sent that is due
// CUTOVER_LEAD or more from now, and answers stopped_output at once with
// the cut's position (nextSeq is the first frame it will NOT send); it
// sends every frame before the cut, on time, and then nothing, running on
// until the worker stops it. On abort it resumes from the cut (or goes on,
// if the cut was not reached): no sequence number skipped or repeated.
// The target sends the cut's frame at its slot whatever the source does,
// so the source never sends a frame before the cut later than 1 ms (at
// most half a frame interval) before that slot: a source that a busy host
// held up past it drops the frames it has left before the cut (a warning,
// and dropped_at_cut in its stop line) instead of sending them after the
// target's first. A frame may go out late or, past that deadline, not at
// all, but never out of order or twice.
//
// As a handover's target (NORSK_MIGRATION_HANDOVER=1; hello_ack says
// handover): it sends nothing. On initial_state (the source's position) it answers ready
// with {"frameRate": r, "node": "<NORSK_NODE_ID>"}. On apply_from (the
// source's stopped_output) it starts at exactly the source's nextSeq, frame
// n due at the source's nextDueUnixNano + (n-nextSeq)/frameRate (the
// source's clock, continued), and answers applied once that first frame has
// gone out (logging how long after the source wrote the cut it got it, and
// warning when that is negative: its wall clock is behind the source's):
//
//	{"applied": ["frames"], "failed": [], "skewMs": 0.4}
//
// skewMs is how late the first frame went out against its due time. When
// the cut reaches the target after it was due, the target starts at once
// and catches up (re-basing its clock when more than a second behind); when
// it does not manage to send the first frame within 2 s of its due time the
// summary lists {"id": "frames", "reason": …} in failed. An aborted target
// stays silent until it is stopped. Both instances must have the same wall
// clock (NTP or PTP; the cut is off by their skew) for the cut to be
// seamless: the sink then sees the source's last frame and the target's
// first one frame interval apart.
//
// # Pacing at the cut
//
// A Go timer wakes up to a millisecond late on an idle host and far later
// on a busy one, and the gap at the cut is exactly the lateness of two
// frames: the source's last and the target's first. So the frames
// either side of a cut (the source's last two before it, the target's first
// two) are paced precisely: the send loop wakes 50 ms ahead and the rest of
// the wait is slept in the kernel on a thread raised to SCHED_FIFO at
// CUTOVER_PRIORITY, which the kernel wakes on time whatever else the host
// runs, until the frame is written. Without the right to raise it
// (CAP_SYS_NICE; a container usually lacks it) or with CUTOVER_PRIORITY=0,
// the thread sleeps until 5 ms before and waits the rest awake, which is
// exact on a quiet host and not under load (docs/decisions/0055-frame-exact-cutover.md
// has both measured). Every other frame is paced by an ordinary timer.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
	"github.com/norsk-go/norsk-manager/pkg/jobsocket"
)

const (
	defaultFrameRate = 25
	maxFrameRate     = 100_000
	// behindLimit is how late a frame may be before the schedule is re-based.
	behindLimit = time.Second
	// progressInterval is how often a progress line is logged.
	progressInterval = 10 * time.Second
	// errorLogInterval limits how often UDP send errors are logged.
	errorLogInterval = 10 * time.Second
	// defaultCutoverLead is CUTOVER_LEAD's default: how far in the future
	// a handover source cuts, so that the Manager's relay of the cut
	// reaches the target before it is due.
	defaultCutoverLead = 400 * time.Millisecond
	maxCutoverLead     = time.Minute
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		log.Error("sample-media: bad configuration", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, log); err != nil {
		log.Error("sample-media failed", "err", err)
		os.Exit(1)
	}
}

// config is the program's environment, parsed.
type config struct {
	Sink       string
	FrameRate  float64
	StartSeq   uint64
	FrameCount uint64 // 0 = unlimited
	StreamID   string

	JobID, Role, RuntimeRole, NodeID string

	// JobSocket is NORSK_JOB_SOCKET ("" = no handover); MigrationID is
	// NORSK_MIGRATION_ID (set on a migration target) and Handover
	// NORSK_MIGRATION_HANDOVER=1 (a handover's target); CutoverLead is how
	// far ahead a source puts its cut.
	JobSocket   string
	MigrationID string
	Handover    bool
	CutoverLead time.Duration
	// CutoverPriority is the real-time priority the frames next to a cut
	// are paced at (0: none, wait awake).
	CutoverPriority int
}

// handoverTarget reports whether the job starts as a handover's target:
// silent until it is applied.
func (c config) handoverTarget() bool {
	return c.JobSocket != "" && c.MigrationID != "" && c.Handover
}

// loadConfig reads and checks the environment through getenv.
func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		Sink:        strings.TrimSpace(getenv("SINK")),
		FrameRate:   defaultFrameRate,
		StreamID:    getenv("STREAM_ID"),
		JobID:       getenv("NORSK_JOB_ID"),
		Role:        getenv("NORSK_ROLE"),
		RuntimeRole: getenv("NORSK_RUNTIME_ROLE"),
		NodeID:      getenv("NORSK_NODE_ID"),
		JobSocket:   getenv(jobsocket.EnvSocket),
		MigrationID: getenv("NORSK_MIGRATION_ID"),
		Handover:    getenv(jobsocket.EnvHandover) == "1",
		CutoverLead: defaultCutoverLead,

		CutoverPriority: defaultCutoverPriority,
	}
	if cfg.Sink == "" {
		return cfg, errors.New("SINK is not set (udp://host:port, file:///path, - or stdout)")
	}
	if v := strings.TrimSpace(getenv("FRAME_RATE")); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(r) || r <= 0 || r > maxFrameRate {
			return cfg, fmt.Errorf("FRAME_RATE %q: want a number of frames per second in (0, %d]", v, maxFrameRate)
		}
		cfg.FrameRate = r
	}
	if v := strings.TrimSpace(getenv("CUTOVER_LEAD")); v != "" {
		d, err := parseLead(v)
		if err != nil {
			return cfg, err
		}
		cfg.CutoverLead = d
	}
	if v := strings.TrimSpace(getenv("CUTOVER_PRIORITY")); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 99 {
			return cfg, fmt.Errorf("CUTOVER_PRIORITY %q: want 0 (none) to 99", v)
		}
		cfg.CutoverPriority = p
	}
	var err error
	if cfg.StartSeq, err = parseUint(getenv, "START_SEQ"); err != nil {
		return cfg, err
	}
	if cfg.FrameCount, err = parseUint(getenv, "FRAME_COUNT"); err != nil {
		return cfg, err
	}
	if cfg.StreamID == "" {
		cfg.StreamID = cfg.JobID
	}
	if cfg.StreamID == "" {
		cfg.StreamID = "sample-media"
	}
	if len(cfg.StreamID) > frames.MaxStreamIDLen {
		return cfg, fmt.Errorf("STREAM_ID is %d bytes, at most %d", len(cfg.StreamID), frames.MaxStreamIDLen)
	}
	return cfg, nil
}

func parseUint(getenv func(string) string, name string) (uint64, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want an unsigned integer", name, v)
	}
	return n, nil
}

// parseLead reads CUTOVER_LEAD: a Go duration ("400ms") or whole
// milliseconds ("400"), at most maxCutoverLead.
func parseLead(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, merr := strconv.ParseUint(v, 10, 32)
		if merr != nil {
			return 0, fmt.Errorf("CUTOVER_LEAD %q: want a duration (400ms) or milliseconds (400)", v)
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d < 0 || d > maxCutoverLead {
		return 0, fmt.Errorf("CUTOVER_LEAD %q: want 0 to %s", v, maxCutoverLead)
	}
	return d, nil
}

// openSink opens the sink named by spec. A lossy sink (UDP) has write errors
// that the stream survives; any other sink's write error ends the program.
func openSink(spec string, stdout io.Writer) (w io.Writer, closer func() error, lossy bool, err error) {
	noClose := func() error { return nil }
	if spec == "-" || spec == "stdout" {
		return stdout, noClose, false, nil
	}
	u, err := url.Parse(spec)
	if err != nil {
		return nil, nil, false, fmt.Errorf("SINK %q: %w", spec, err)
	}
	switch u.Scheme {
	case "udp":
		if u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return nil, nil, false, fmt.Errorf("SINK %q: want udp://host:port", spec)
		}
		conn, err := net.Dial("udp", u.Host)
		if err != nil {
			return nil, nil, false, fmt.Errorf("SINK %q: %w", spec, err)
		}
		return conn, conn.Close, true, nil
	case "file":
		if (u.Host != "" && u.Host != "localhost") || u.Path == "" {
			return nil, nil, false, fmt.Errorf("SINK %q: want file:///absolute/path", spec)
		}
		f, err := os.OpenFile(u.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, false, fmt.Errorf("SINK %q: %w", spec, err)
		}
		return f, f.Close, false, nil
	default:
		return nil, nil, false, fmt.Errorf("SINK %q: want udp://host:port, file:///path, - or stdout", spec)
	}
}

// payload returns the frame payload identifying this sender.
func payload(cfg config) []byte {
	p := fmt.Sprintf("node=%s role=%s pid=%d", cfg.NodeID, cfg.RuntimeRole, os.Getpid())
	if len(p) > frames.MaxPayloadLen {
		p = p[:frames.MaxPayloadLen]
	}
	return []byte(p)
}

// run sends frames to cfg.Sink until ctx ends or cfg.FrameCount frames are
// sent, and returns nil; it returns an error when the sink cannot be opened
// or a non-lossy sink fails. stdout is the "-" sink. With cfg.JobSocket set
// it also serves the handover on the job socket (a handover's target sends
// nothing until it is applied).
func run(ctx context.Context, cfg config, stdout io.Writer, log *slog.Logger) (err error) {
	log = log.With("job", cfg.JobID, "role", cfg.Role, "runtime_role", cfg.RuntimeRole, "stream", cfg.StreamID)
	w, closeSink, lossy, err := openSink(cfg.Sink, stdout)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := closeSink(); cerr != nil && err == nil {
			err = fmt.Errorf("closing sink: %w", cerr)
		}
	}()
	out := newOutput(cfg.FrameRate, cfg.StartSeq, time.Now(), cfg.handoverTarget())
	if cfg.JobSocket != "" {
		h := newHandover(out, cfg, log)
		hctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.serve(hctx, cfg.JobSocket)
		}()
		defer func() {
			stop()
			<-done
		}()
	}
	return stream(ctx, cfg, out, w, lossy, log)
}

// stream is the send loop: it sends each frame out lets through, when it is
// due, until ctx ends or cfg.FrameCount frames are sent.
func stream(ctx context.Context, cfg config, out *output, w io.Writer, lossy bool, log *slog.Logger) (err error) {
	var (
		body       = payload(cfg)
		buf        = make([]byte, 0, frames.MaxRecordLen)
		sent       uint64 // frames sent (attempted, for a lossy sink)
		lastSeq    uint64 // the last of them
		sendErrors uint64
		lastErrLog time.Time
		stopCause  = "frame count reached"
		start      = time.Now()
		pace       = newPacer(cfg.CutoverPriority, log)
		// release gives back the thread a precise frame was paced on.
		release = func() {}
	)
	defer func() { release() }()
	log.Info("sample-media started", "node", cfg.NodeID, "sink", cfg.Sink, "frame_rate", cfg.FrameRate,
		"start_seq", cfg.StartSeq, "frame_count", cfg.FrameCount, "pid", os.Getpid(),
		"job_socket", cfg.JobSocket, "migration_id", cfg.MigrationID, "holding", out.isHolding())
	defer func() {
		next := out.nextSeq()
		attrs := []any{"cause", stopCause, "frames_sent", sent, "send_errors", sendErrors,
			"next_seq", next, "elapsed", time.Since(start).Round(time.Millisecond)}
		if m := out.missedCut(); len(m) > 0 {
			attrs = append(attrs, "dropped_at_cut", m)
		}
		if sent > 0 {
			attrs = append([]any{"last_seq", lastSeq}, attrs...)
		}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		log.Info("sample-media stopped", attrs...)
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	progress := time.NewTicker(progressInterval)
	defer progress.Stop()

	for cfg.FrameCount == 0 || sent < cfg.FrameCount {
		release()
		release = func() {}
		var due <-chan time.Time
		if seq, at, precise, ok := out.nextFrame(); ok {
			late := time.Since(at)
			if precise && late < 0 && -late <= preciseLead {
				release = pace.await(at)
				late = time.Since(at)
			}
			if late >= 0 {
				if late > behindLimit {
					log.Warn("behind schedule; re-basing the frame clock", "late", late.Round(time.Millisecond), "seq", seq)
					out.rebase(seq, time.Now())
				}
				if ctx.Err() != nil {
					stopCause = context.Cause(ctx).Error()
					return nil
				}
				now := time.Now()
				ok, missed := out.claim(seq, now)
				if missed > 0 {
					log.Warn("too late for the cut: dropping the frames left before it rather than sending them after the target's first",
						"first_seq", seq, "last_seq", seq+missed-1, "late", late.Round(time.Microsecond))
				}
				if !ok {
					continue // the gate moved meanwhile, or the frames missed the cut
				}
				buf, err = frames.Append(buf[:0], frames.Frame{
					Seq:          seq,
					SentUnixNano: now.UnixNano(),
					StreamID:     cfg.StreamID,
					Payload:      body,
				})
				if err != nil {
					return err // cannot happen: loadConfig and payload keep the limits
				}
				_, werr := w.Write(buf)
				out.sent(seq, now)
				sent++
				lastSeq = seq
				if werr != nil {
					if !lossy {
						stopCause = "sink failed"
						return fmt.Errorf("writing frame %d: %w", seq, werr)
					}
					sendErrors++
					if time.Since(lastErrLog) >= errorLogInterval {
						log.Warn("send failed; the stream goes on", "seq", seq, "err", werr, "send_errors", sendErrors)
						lastErrLog = time.Now()
					}
				}
				continue
			}
			wait := -late
			if precise {
				wait -= preciseLead // wake early; the pacer waits out the rest
			}
			timer.Reset(wait)
			due = timer.C
		}
		// Wait until the frame is due, the gate moves, or the end.
		select {
		case <-ctx.Done():
			stopCause = context.Cause(ctx).Error()
			return nil
		case <-progress.C:
			log.Info("progress", "frames_sent", sent, "next_seq", out.nextSeq(), "send_errors", sendErrors, "holding", out.isHolding())
		case <-out.wake:
		case <-due:
		}
		timer.Stop()
	}
	return nil
}
