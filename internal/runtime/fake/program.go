package fake

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// program is what a service does when it runs (the package comment's
// flags).
type program struct {
	exitCode   int
	run        time.Duration // 0: until signalled
	ignoreTerm bool
	listen     uint32 // container port answered with a greeting; 0: none
}

// parseProgram reads a service's program from its command (after the
// executable) and args.
func parseProgram(svc *managerv1.Service) (program, error) {
	var args []string
	if c := svc.GetCommand(); len(c) > 1 {
		args = append(args, c[1:]...)
	}
	args = append(args, svc.GetArgs()...)
	var p program
	fs := flag.NewFlagSet(svc.GetName(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&p.exitCode, "exit", 0, "")
	fs.DurationVar(&p.run, "run", 0, "")
	fs.BoolVar(&p.ignoreTerm, "ignore-term", false, "")
	listen := fs.Uint("listen", 0, "")
	if err := fs.Parse(args); err != nil {
		return program{}, err
	}
	if fs.NArg() != 0 {
		return program{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *listen > 65535 {
		return program{}, fmt.Errorf("-listen %d out of range", *listen)
	}
	p.listen = uint32(*listen)
	return p, nil
}

// portSpec is one port mapping of a prepared service.
type portSpec struct {
	target uint32
	proto  managerv1.Protocol
	// lo..hi is the host port range to bind in; 0..0 any free port.
	lo, hi uint32
}

// execution is one run of a service's program: from StartService until it
// exits (by itself, signalled, or killed). Its fields are guarded by the
// host's lock, except done, closed once when it has exited.
type execution struct {
	startedAt time.Time
	done      chan struct{}
	ports     []boundPort
	timer     *time.Timer
}

// boundPort is a published port held while the program runs.
type boundPort struct {
	spec      portSpec
	published uint32
	closer    io.Closer
}

func (e *execution) running() bool {
	select {
	case <-e.done:
		return false
	default:
		return true
	}
}

// resolved is the run's published ports (runtime.ServiceStatus.Ports).
func (e *execution) resolved() []*managerv1.ResolvedPortMapping {
	out := make([]*managerv1.ResolvedPortMapping, 0, len(e.ports))
	for _, p := range e.ports {
		out = append(out, &managerv1.ResolvedPortMapping{
			Url:       net.JoinHostPort("127.0.0.1", strconv.FormatUint(uint64(p.published), 10)),
			Target:    p.spec.target,
			Published: p.published,
			Protocol:  p.spec.proto,
		})
	}
	return out
}

// start runs s's program: it binds its ports (answering on the -listen one)
// and, for a program that exits by itself, arms its exit. Call with the
// host's lock held.
func (h *Host) start(s *service) error {
	e := &execution{startedAt: time.Now(), done: make(chan struct{})}
	for _, ps := range s.ports {
		bp, err := bind(ps, ps.target == s.prog.listen)
		if err != nil {
			closePorts(e.ports)
			return fmt.Errorf("start %s of %s: port %d: %w", s.name, s.key, ps.target, err)
		}
		e.ports = append(e.ports, bp)
	}
	s.run = e
	s.logf("started")
	if s.prog.run > 0 {
		e.timer = time.AfterFunc(s.prog.run, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.exit(s, e, s.prog.exitCode, "exited")
		})
	}
	return nil
}

// exit ends run e of s with code, if it still runs. Call with the host's
// lock held.
func (h *Host) exit(s *service, e *execution, code int, how string) {
	if !e.running() {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	closePorts(e.ports)
	if s.run == e {
		s.exitCode = code
	}
	s.logf("%s with code %d", how, code)
	close(e.done)
}

// bind holds a host port for ps on 127.0.0.1; greet makes it answer TCP
// connections with the test program's greeting.
func bind(ps portSpec, greet bool) (boundPort, error) {
	lo, hi := ps.lo, ps.hi
	if lo == 0 {
		lo, hi = 0, 0
	}
	var last error
	for port := lo; port <= hi; port++ {
		addr := net.JoinHostPort("127.0.0.1", strconv.FormatUint(uint64(port), 10))
		if ps.proto == managerv1.Protocol_PROTOCOL_UDP {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				last = err
				continue
			}
			return boundPort{spec: ps, published: uint32(pc.LocalAddr().(*net.UDPAddr).Port), closer: pc}, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			last = err
			continue
		}
		if greet {
			go answer(ln)
		}
		return boundPort{spec: ps, published: uint32(ln.Addr().(*net.TCPAddr).Port), closer: ln}, nil
	}
	return boundPort{}, fmt.Errorf("no free host port in %d-%d: %w", lo, hi, last)
}

// answer greets every connection to ln until ln is closed.
func answer(ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed when the run ends
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_, _ = c.Write([]byte("testprog\n"))
		}()
	}
}

func closePorts(ps []boundPort) {
	for _, p := range ps {
		_ = p.closer.Close()
	}
}

// sortStatuses orders statuses by key, then service.
func sortStatuses(sts []runtime.ServiceStatus) {
	slices.SortFunc(sts, func(a, b runtime.ServiceStatus) int {
		return cmp.Or(cmp.Compare(a.Key.JobID, b.Key.JobID), cmp.Compare(a.Key.Role, b.Key.Role), cmp.Compare(a.Service, b.Service))
	})
}
