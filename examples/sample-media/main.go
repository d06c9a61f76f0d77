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
// skips a sequence number.
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
//
// Every frame's payload is the text "node=<NORSK_NODE_ID> role=<NORSK_RUNTIME_ROLE>
// pid=<pid>" (truncated to frames.MaxPayloadLen), so a receiver can tell
// which instance sent which frames.
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
// or a non-lossy sink fails. stdout is the "-" sink.
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

	frameDue := func(n uint64) time.Duration {
		return time.Duration(math.Round(float64(n) * float64(time.Second) / cfg.FrameRate))
	}
	var (
		body       = payload(cfg)
		buf        = make([]byte, 0, frames.MaxRecordLen)
		sent       uint64 // frames sent (attempted, for a lossy sink)
		sendErrors uint64
		lastErrLog time.Time
		stopCause  = "frame count reached"
		start      = time.Now()
	)
	log.Info("sample-media started", "node", cfg.NodeID, "sink", cfg.Sink, "frame_rate", cfg.FrameRate,
		"start_seq", cfg.StartSeq, "frame_count", cfg.FrameCount, "pid", os.Getpid())
	defer func() {
		attrs := []any{"cause", stopCause, "frames_sent", sent, "send_errors", sendErrors,
			"next_seq", cfg.StartSeq + sent, "elapsed", time.Since(start).Round(time.Millisecond)}
		if sent > 0 {
			attrs = append([]any{"last_seq", cfg.StartSeq + sent - 1}, attrs...)
		}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		log.Info("sample-media stopped", attrs...)
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	progress := time.NewTicker(progressInterval)
	defer progress.Stop()

	for n := uint64(0); cfg.FrameCount == 0 || n < cfg.FrameCount; n++ {
		// Wait until frame n is due, or stop.
		for wait := true; wait; {
			late := time.Since(start.Add(frameDue(n)))
			if late >= 0 {
				if late > behindLimit {
					log.Warn("behind schedule; re-basing the frame clock", "late", late.Round(time.Millisecond), "seq", cfg.StartSeq+n)
					start = time.Now().Add(-frameDue(n))
				}
				select {
				case <-ctx.Done():
					stopCause = context.Cause(ctx).Error()
					return nil
				default:
				}
				break
			}
			timer.Reset(-late)
			select {
			case <-ctx.Done():
				stopCause = context.Cause(ctx).Error()
				return nil
			case <-progress.C:
				log.Info("progress", "frames_sent", sent, "next_seq", cfg.StartSeq+sent, "send_errors", sendErrors)
				timer.Stop()
			case <-timer.C:
				wait = false
			}
		}

		seq := cfg.StartSeq + n
		buf, err = frames.Append(buf[:0], frames.Frame{
			Seq:          seq,
			SentUnixNano: time.Now().UnixNano(),
			StreamID:     cfg.StreamID,
			Payload:      body,
		})
		if err != nil {
			return err // cannot happen: loadConfig and payload keep the limits
		}
		_, werr := w.Write(buf)
		sent++
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
	}
	return nil
}
