// Command sink receives the sample media job's frame stream and prints its
// continuity: how many frames arrived, the sequence range, missing ranges,
// duplicates, reordering, the longest silence between two frames, and which
// senders (payloads: node, runtime role, pid) the frames came from. It is a
// demo tool; tests use package frames directly.
//
// Usage:
//
//	sink [-listen :5000] [-interval 5s] [-require-continuous]
//	sink -file frames.bin            read records from a file sink's file
//	sample-media | sink -file -      (with SINK=-) read records from stdin
//
// Listening on UDP, it prints a report every -interval (0: none) and a final
// one on SIGINT or SIGTERM. Reading a file, it prints the final report at the
// end of the file. Records that do not decode are counted and skipped (UDP)
// or end the reading (a file, whose framing is then lost). It exits 0, or 1
// with -require-continuous when the stream was not continuous, or 2 on a
// usage or I/O error.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/norsk-go/norsk-manager/examples/sample-media/frames"
)

func main() {
	listen := flag.String("listen", ":5000", "UDP address to receive frames on")
	file := flag.String("file", "", "read records from this file (- for stdin) instead of UDP")
	interval := flag.Duration("interval", 5*time.Second, "how often to print a report while listening (0: only at the end)")
	requireContinuous := flag.Bool("require-continuous", false, "exit 1 unless the stream had no missing or duplicated frame")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sink: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rcv := newReceiver()
	var err error
	if *file != "" {
		err = readFile(rcv, *file)
	} else {
		err = listenUDP(ctx, rcv, *listen, *interval, os.Stdout)
	}
	fmt.Println("final:", rcv.summary())
	if err != nil {
		fmt.Fprintln(os.Stderr, "sink:", err)
		os.Exit(2)
	}
	if *requireContinuous && !rcv.chk.Report().Continuous() {
		os.Exit(1)
	}
}

func readFile(rcv *receiver, name string) error {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	return rcv.readStream(bufio.NewReader(r))
}

func listenUDP(ctx context.Context, rcv *receiver, addr string, interval time.Duration, out io.Writer) error {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(out, "listening on udp %s\n", conn.LocalAddr())
	if interval > 0 {
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					fmt.Fprintf(out, "%s %s\n", now.Format(time.TimeOnly), rcv.summary())
				}
			}
		}()
	}
	return rcv.serveUDP(ctx, conn)
}

// maxSenders bounds the distinct payloads a receiver tracks.
const maxSenders = 64

// receiver feeds received records to a Checker and counts what does not
// decode. It is safe for concurrent use.
type receiver struct {
	chk frames.Checker

	mu           sync.Mutex
	senders      map[string]uint64 // by payload text
	otherSenders uint64            // frames from senders past maxSenders
	bad          uint64
	lastBad      error
}

func newReceiver() *receiver {
	return &receiver{senders: make(map[string]uint64)}
}

func (r *receiver) add(f frames.Frame, at time.Time) {
	r.chk.Add(f, at)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := string(f.Payload)
	if _, ok := r.senders[s]; ok || len(r.senders) < maxSenders {
		r.senders[s]++
	} else {
		r.otherSenders++
	}
}

func (r *receiver) addBad(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bad++
	r.lastBad = err
}

// serveUDP receives one record per datagram on conn until ctx ends, then
// returns nil; it returns a read error other than the one ctx causes.
func (r *receiver) serveUDP(ctx context.Context, conn net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, frames.MaxRecordLen+1) // +1 sees an oversized datagram as such
	for {
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		f, err := frames.Decode(buf[:n])
		if err != nil {
			r.addBad(err)
			continue
		}
		r.add(f, now)
	}
}

// readStream reads records back to back from rd until it ends. It returns
// nil at a clean end; a record that does not decode is counted and ends
// the reading with an error.
func (r *receiver) readStream(rd io.Reader) error {
	fr := frames.NewReader(rd)
	for {
		f, err := fr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			r.addBad(err)
			return err
		}
		r.add(f, time.Now())
	}
}

// summary is the checker's report, the bad-record count and the senders.
func (r *receiver) summary() string {
	var b strings.Builder
	b.WriteString(r.chk.Report().String())
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&b, " bad_records=%d", r.bad)
	if r.lastBad != nil {
		fmt.Fprintf(&b, " (last: %v)", r.lastBad)
	}
	senders := make([]string, 0, len(r.senders))
	for s := range r.senders {
		senders = append(senders, s)
	}
	sort.Strings(senders)
	for i, s := range senders {
		senders[i] = fmt.Sprintf("%q:%d", s, r.senders[s])
	}
	if r.otherSenders > 0 {
		senders = append(senders, fmt.Sprintf("others:%d", r.otherSenders))
	}
	fmt.Fprintf(&b, " senders={%s}", strings.Join(senders, ","))
	return b.String()
}
