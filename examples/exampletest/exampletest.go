// Package exampletest builds and watches the example programs for tests,
// in examples/ and elsewhere (scenario tests that need a real job to run).
//
// It imports the testing package and is meant only for tests.
package exampletest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Import paths of the example programs.
const (
	HelloPackage       = "github.com/norsk-go/norsk-manager/examples/hello"
	SampleMediaPackage = "github.com/norsk-go/norsk-manager/examples/sample-media"
	SinkPackage        = "github.com/norsk-go/norsk-manager/examples/sample-media/sink"
)

// Build compiles the program at import path pkg as a static binary
// (CGO_ENABLED=0, as the FROM scratch images need) into a fresh temporary
// directory of tb, and returns the binary's path; the binary is named after
// the package's last path element. The calling test must run inside this
// module (any package of it will do). It skips tb when there is no go
// command, and fails it when the build fails.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		tb.Skipf("no go command to build %s: %v", pkg, err)
	}
	out := tb.TempDir() + "/" + path.Base(pkg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// Env returns the current environment without the variables the example
// programs read (NORSK_*, PORT, SINK, FRAME_RATE, FRAME_COUNT, START_SEQ,
// STREAM_ID), followed by kv ("NAME=value" each), so that a test controls
// exactly what a program sees.
func Env(kv ...string) []string {
	read := map[string]bool{"PORT": true, "SINK": true, "FRAME_RATE": true, "FRAME_COUNT": true, "START_SEQ": true, "STREAM_ID": true}
	var env []string
	for _, e := range os.Environ() {
		name, _, _ := strings.Cut(e, "=")
		if read[name] || strings.HasPrefix(name, "NORSK_") {
			continue
		}
		env = append(env, e)
	}
	return append(env, kv...)
}

// Log is an io.Writer that keeps what a program writes (its log) and lets a
// test wait for a line. It is safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// Write appends p.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(p), nil
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Find returns the submatches of the first complete line matching re, or
// nil when no line matches yet.
func (l *Log) Find(re *regexp.Regexp) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return find(l.buf.String(), re)
}

func find(s string, re *regexp.Regexp) []string {
	lines := strings.Split(s, "\n")
	for _, line := range lines[:len(lines)-1] { // the last is incomplete
		if m := re.FindStringSubmatch(line); m != nil {
			return m
		}
	}
	return nil
}

// WaitFor waits up to timeout for a complete line matching re and returns
// its submatches; it fails tb, showing the log, when none comes in time.
func (l *Log) WaitFor(tb testing.TB, re *regexp.Regexp, timeout time.Duration) []string {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		m := find(l.buf.String(), re)
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()
		if m != nil {
			return m
		}
		select {
		case <-changed:
		case <-deadline.C:
			tb.Fatalf("no log line matching %q within %v; log:\n%s", re, timeout, l.String())
			return nil
		}
	}
}

// Proc is a started program whose exit a test can wait for.
type Proc struct {
	Cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// Start starts cmd and registers a cleanup on tb that kills it if it is
// still running when the test ends.
func Start(tb testing.TB, cmd *exec.Cmd) *Proc {
	tb.Helper()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", cmd.Path, err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Wait waits up to timeout for the program to exit and returns what
// exec.Cmd.Wait returned (nil for exit status 0). It fails tb when the
// program is still running at the timeout.
func (p *Proc) Wait(tb testing.TB, timeout time.Duration) error {
	tb.Helper()
	select {
	case <-p.done:
		return p.waitErr
	case <-time.After(timeout):
		tb.Fatalf("%s still running after %v", p.Cmd.Path, timeout)
		return nil
	}
}

// Eventually polls cond every few milliseconds until it returns true, and
// fails tb with msg when timeout passes first.
func Eventually(tb testing.TB, timeout time.Duration, msg string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %v: %s", timeout, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
