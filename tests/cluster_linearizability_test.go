package tests

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Concurrent clients, each bound to one member (so most go through
// followers: writes forwarded to the primary, linearizable reads confirmed
// with it), put, read and compare-and-set a few keys while the primary is
// stopped and restarted and members are cut off and healed. The history
// must be linearizable against a register per key whose revisions are the
// store's (raft) indexes: a read sees the latest write, a compare-and-set
// applies exactly when the key is at the revision it expects, and a key's
// revision grows with every write.
//
// A write that fails ambiguously (UNAVAILABLE, a deadline, a dropped
// connection: it may or may not have applied) has an unknown outcome: it
// never returns (Return = +inf): porcupine may place it anywhere after its
// call, or after everything (not applied). Even one no read saw is kept: it
// may be what made a later compare-and-set refuse. A read that fails is
// dropped. A definite
// refusal (a compare-and-set's FAILED_PRECONDITION) is a known outcome.
//
// On a violation the history is written as porcupine's visualization (and
// a text dump) to a directory the log names; set NORSK_TEST_ARTIFACTS to
// choose it.
func TestClusterKVLinearizable(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a fault-injection run of several seconds")
	}
	const (
		namespace = "linearizability"
		clients   = 6
		opTimeout = 2 * time.Second
	)
	keys := []string{"k0", "k1", "k2", "k3"}

	c := testcluster.New(t, testcluster.Options{Members: 3})
	var full []*testcluster.Member
	for _, m := range c.Members {
		if !m.Witness {
			full = append(full, m)
		}
	}

	start := time.Now() // every timestamp is monotonic time since start
	now := func() int64 { return int64(time.Since(start)) }
	h := &linzHistory{}
	var faults []porcupine.Annotation
	ctxRun, stopRun := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Before the cluster stops (cleanups run last first), and on a fatal
	// failure too: no client outlives the test.
	t.Cleanup(func() { stopRun(); wg.Wait() })
	for i := range clients {
		cl := &linzClient{
			id: i, m: full[i%len(full)], ns: namespace, keys: keys, timeout: opTimeout,
			rng:  rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i))),
			last: map[string]linzRead{}, h: h, now: now, t: t,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl.run(ctxRun)
		}()
	}

	// The faults, one after another, with the load running throughout.
	fault := func(what string, f func()) {
		t0 := now()
		f()
		faults = append(faults, porcupine.Annotation{Tag: "faults", Start: t0, End: now(), Description: what})
		t.Logf("%6.2fs %s", time.Duration(t0).Seconds(), what)
	}
	pause := func(d time.Duration) { time.Sleep(d) } // pacing only, never an assertion
	pause(1500 * time.Millisecond)

	// 1. The primary stops; the others elect a new one; it comes back as a
	// follower.
	old := c.Primary()
	fault("stop the primary "+old.Name, old.Stop)
	var p *testcluster.Member
	fault("await a new primary", func() { p = waitNewPrimary(t, c, others(c, old)) })
	t.Logf("new primary: %s", p.Name)
	pause(1 * time.Second)
	fault("restart "+old.Name, old.Start)
	pause(1 * time.Second)

	// 2. The primary is cut off from the other members (its clients still
	// reach it), then the network heals.
	p = c.Primary()
	fault("isolate the primary "+p.Name, func() { c.Net.Isolate(p.Name) })
	var np *testcluster.Member
	fault("await a new primary", func() { np = waitNewPrimary(t, c, others(c, p)) })
	t.Logf("new primary: %s", np.Name)
	pause(1 * time.Second)
	fault("heal", c.Net.Heal)
	pause(1 * time.Second)

	// 3. A follower is cut off, then the network heals.
	p = c.Primary()
	f := others(c, p)[0]
	fault("isolate the follower "+f.Name, func() { c.Net.Isolate(f.Name) })
	pause(1500 * time.Millisecond)
	fault("heal", c.Net.Heal)
	pause(1500 * time.Millisecond)

	stopRun()
	wg.Wait()
	runFor := time.Since(start)

	ops, st := h.prepare()
	t.Logf("history over %s: %s", runFor.Round(time.Millisecond), st)
	if st.okWrites == 0 || st.okReads == 0 {
		t.Fatalf("too little succeeded to check anything: %s", st)
	}

	model := linzModel()
	t0 := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	t.Logf("porcupine: %v on %d operations in %s", res, len(ops), time.Since(t0).Round(time.Millisecond))
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Skipf("porcupine could not decide within its bound (%d operations); not a failure", len(ops))
	case porcupine.Illegal:
		dir := os.Getenv("NORSK_TEST_ARTIFACTS")
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "norsk-linearizability-"); err != nil {
				t.Fatalf("the history is not linearizable, and no directory for the visualization: %v", err)
			}
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("the history is not linearizable, and no directory for the visualization: %v", err)
		}
		info.AddAnnotations(faults)
		vis := filepath.Join(dir, "linearizability.html")
		if err := porcupine.VisualizePath(model, info, vis); err != nil {
			t.Logf("visualization: %v", err)
		}
		dump := filepath.Join(dir, "history.txt")
		bad := linzDump(t, model, ops, faults, dump)
		stale := linzStaleReads(ops)
		for i, s := range stale {
			if i == 10 {
				t.Logf("… %d more stale reads in %s", len(stale)-i, dump)
				break
			}
			t.Log(s)
		}
		t.Fatalf("the KV history is not linearizable (keys %v); visualization: %s; history: %s", bad, vis, dump)
	}
}

// linzOpKind is what a client did.
type linzOpKind int

const (
	linzPut linzOpKind = iota
	linzGet
	linzCAS
)

// linzInput is an operation's input. A put and a compare-and-set write a
// unique Value; a compare-and-set expects the key as a read saw it.
type linzInput struct {
	Kind   linzOpKind
	Key    string
	Value  string
	Member string
	// Role is what the member was when the call began: "p" (the ready
	// primary) or "f" (not: a follower, or a primary not ready).
	Role string
	// ExpPresent, ExpValue, ExpRev: what the compare-and-set's read saw
	// (absent, or ExpValue at revision ExpRev).
	ExpPresent bool
	ExpValue   string
	ExpRev     uint64
}

// linzOutput is an operation's outcome.
type linzOutput struct {
	// Unknown: the write failed ambiguously (it may have applied).
	Unknown bool
	// Refused: a compare-and-set's definite FAILED_PRECONDITION.
	Refused bool
	// Rev: the revision a write committed at; for a read, the key's.
	Rev uint64
	// Present, Value: what a read saw.
	Present bool
	Value   string
	Err     string
}

// linzReg is one key's state: absent, or Value at revision Rev (0 = the
// revision is not known: the last write's outcome was unknown).
type linzReg struct {
	Present bool
	Value   string
	Rev     uint64
}

func linzModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range history {
				k := op.Input.(linzInput).Key
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			var out [][]porcupine.Operation
			for _, k := range order {
				out = append(out, byKey[k])
			}
			return out
		},
		PartitionEvent: func(history []porcupine.Event) [][]porcupine.Event {
			key := map[int]string{}
			byKey := map[string][]porcupine.Event{}
			var order []string
			for _, e := range history {
				if e.Kind == porcupine.CallEvent {
					key[e.Id] = e.Value.(linzInput).Key
				}
				k := key[e.Id]
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = append(byKey[k], e)
			}
			var out [][]porcupine.Event
			for _, k := range order {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() interface{} { return linzReg{} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			s, in, out := state.(linzReg), input.(linzInput), output.(linzOutput)
			// A write's revision is its raft index: it exceeds the
			// revision of every write before it.
			grows := func(rev uint64) bool { return s.Rev == 0 || rev > s.Rev }
			switch in.Kind {
			case linzGet:
				if out.Present != s.Present {
					return false, s
				}
				if !s.Present {
					return true, s
				}
				if out.Value != s.Value || (s.Rev != 0 && out.Rev != s.Rev) {
					return false, s
				}
				return true, linzReg{Present: true, Value: s.Value, Rev: out.Rev}
			case linzPut:
				if out.Unknown {
					return true, linzReg{Present: true, Value: in.Value}
				}
				return grows(out.Rev), linzReg{Present: true, Value: in.Value, Rev: out.Rev}
			case linzCAS:
				holds := !s.Present
				if in.ExpPresent {
					holds = s.Present && s.Value == in.ExpValue && (s.Rev == 0 || s.Rev == in.ExpRev)
				}
				switch {
				case out.Refused:
					return !holds, s
				case out.Unknown: // applied if it held, refused if not
					if !holds {
						return true, s
					}
					return true, linzReg{Present: true, Value: in.Value}
				default:
					return holds && grows(out.Rev), linzReg{Present: true, Value: in.Value, Rev: out.Rev}
				}
			}
			return false, s
		},
		Equal: func(a, b interface{}) bool { return a.(linzReg) == b.(linzReg) },
		DescribeOperation: func(input, output interface{}) string {
			return linzDescribe(input.(linzInput), output.(linzOutput))
		},
		DescribeState: func(state interface{}) string {
			s := state.(linzReg)
			if !s.Present {
				return "absent"
			}
			if s.Rev == 0 {
				return s.Value + "@?"
			}
			return fmt.Sprintf("%s@%d", s.Value, s.Rev)
		},
	}
}

func linzDescribe(in linzInput, out linzOutput) string {
	var res string
	switch {
	case out.Unknown:
		res = "unknown (" + out.Err + ")"
	case out.Refused:
		res = "refused"
	case in.Kind == linzGet && !out.Present:
		res = "absent"
	case in.Kind == linzGet:
		res = fmt.Sprintf("%s@%d", out.Value, out.Rev)
	default:
		res = fmt.Sprintf("ok @%d", out.Rev)
	}
	via := in.Member + "/" + in.Role
	switch in.Kind {
	case linzGet:
		return fmt.Sprintf("[%s] get(%s) → %s", via, in.Key, res)
	case linzPut:
		return fmt.Sprintf("[%s] put(%s, %s) → %s", via, in.Key, in.Value, res)
	default:
		exp := "absent"
		if in.ExpPresent {
			exp = fmt.Sprintf("%s@%d", in.ExpValue, in.ExpRev)
		}
		return fmt.Sprintf("[%s] cas(%s, %s → %s) → %s", via, in.Key, exp, in.Value, res)
	}
}

// linzHistory collects the clients' operations.
type linzHistory struct {
	mu          sync.Mutex
	ops         []porcupine.Operation
	failedReads int
}

func (h *linzHistory) readFailed() {
	h.mu.Lock()
	h.failedReads++
	h.mu.Unlock()
}

func (h *linzHistory) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

type linzStats struct {
	okWrites, refused, unknownKept, unknownDropped, okReads, failedReads int
}

func (s linzStats) String() string {
	return fmt.Sprintf("%d writes acknowledged, %d compare-and-sets refused, %d writes of unknown outcome (%d seen by a read, %d not), %d reads (%d failed reads dropped)",
		s.okWrites, s.refused, s.unknownKept+s.unknownDropped, s.unknownKept, s.unknownDropped, s.okReads, s.failedReads)
}

// prepare counts the history. Every write of unknown outcome is kept
// (returning never): one no read saw may still explain a refused
// compare-and-set, so dropping it would make a correct history illegal.
func (h *linzHistory) prepare() ([]porcupine.Operation, linzStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := linzStats{failedReads: h.failedReads}
	seen := map[string]bool{}
	for _, op := range h.ops {
		if op.Input.(linzInput).Kind == linzGet {
			if out := op.Output.(linzOutput); out.Present {
				seen[out.Value] = true
			}
		}
	}
	var out []porcupine.Operation
	for _, op := range h.ops {
		in, o := op.Input.(linzInput), op.Output.(linzOutput)
		switch {
		case in.Kind == linzGet:
			st.okReads++
		case o.Unknown && !seen[in.Value]:
			st.unknownDropped++ // unseen, still kept
		case o.Unknown:
			st.unknownKept++
		case o.Refused:
			st.refused++
		default:
			st.okWrites++
		}
		out = append(out, op)
	}
	return out, st
}

// linzRead is what a client last saw of a key.
type linzRead struct {
	present bool
	value   string
	rev     uint64
}

// linzClient issues one operation at a time through its member.
type linzClient struct {
	id      int
	m       *testcluster.Member
	ns      string
	keys    []string
	timeout time.Duration
	rng     *rand.Rand
	last    map[string]linzRead
	h       *linzHistory
	now     func() int64
	t       *testing.T
	seq     int
}

func (c *linzClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		cl := c.m.Client()
		if cl == nil { // the member is stopped
			time.Sleep(10 * time.Millisecond)
			continue
		}
		key := c.keys[c.rng.IntN(len(c.keys))]
		r := c.rng.IntN(100)
		prev, known := c.last[key]
		var err error
		switch {
		case r < 35:
			err = c.write(ctx, cl, linzInput{Kind: linzPut, Key: key})
		case r < 75 || !known:
			err = c.get(ctx, cl, key)
		default:
			err = c.write(ctx, cl, linzInput{Kind: linzCAS, Key: key, ExpPresent: prev.present, ExpValue: prev.value, ExpRev: prev.rev})
		}
		if err != nil {
			time.Sleep(time.Duration(5+c.rng.IntN(20)) * time.Millisecond)
		}
	}
}

// role is "p" while the client's member is the ready primary, else "f".
func (c *linzClient) role() string {
	if s := c.m.Server(); s != nil && s.IsPrimaryReady() {
		return "p"
	}
	return "f"
}

func (c *linzClient) get(ctx context.Context, cl *norsk.Manager, key string) error {
	octx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	role := c.role()
	call := c.now()
	e, err := cl.KvGet(norsk.Linearizable(octx), c.ns, key)
	ret := c.now()
	if errors.Is(err, norsk.ErrNotFound) {
		e, err = nil, nil // an absent key: a read that observed absence
	}
	if err != nil {
		// A failed read observed nothing: drop it.
		c.h.readFailed()
		if errors.Is(err, norsk.ErrInvalidArgument) {
			c.t.Errorf("client %d: get %s from %s: %v", c.id, key, c.m.Name, err)
		}
		return err
	}
	out := linzOutput{}
	if e != nil {
		out = linzOutput{Present: true, Value: string(e.GetValue()), Rev: e.GetRevision()}
	}
	c.last[key] = linzRead{present: out.Present, value: out.Value, rev: out.Rev}
	c.h.add(porcupine.Operation{ClientId: c.id, Input: linzInput{Kind: linzGet, Key: key, Member: c.m.Name, Role: role}, Call: call, Output: out, Return: ret})
	return nil
}

func (c *linzClient) write(ctx context.Context, cl *norsk.Manager, in linzInput) error {
	c.seq++
	in.Value = fmt.Sprintf("c%d-%d", c.id, c.seq)
	in.Member = c.m.Name
	w := norsk.KvPut(in.Key, []byte(in.Value))
	if in.Kind == linzCAS {
		if in.ExpPresent {
			w = w.IfRevision(in.ExpRev)
		} else {
			w = w.IfAbsent()
		}
	}
	octx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	in.Role = c.role()
	call := c.now()
	rev, err := cl.KvCommit(octx, c.ns, []norsk.KvWrite{w}, norsk.KvCommitOptions{})
	ret := c.now()
	var out linzOutput
	switch {
	case err == nil:
		out.Rev = rev
		c.last[in.Key] = linzRead{present: true, value: in.Value, rev: rev}
	case in.Kind == linzCAS && errors.Is(err, norsk.ErrFailedPrecondition) && strings.Contains(err.Error(), "writes[0]"):
		// The store's own refusal (it names the write): nothing applied.
		out.Refused, out.Err = true, err.Error()
		delete(c.last, in.Key)
	default:
		if errors.Is(err, norsk.ErrInvalidArgument) || errors.Is(err, norsk.ErrFailedPrecondition) {
			c.t.Errorf("client %d: %s through %s: unexpected %v", c.id, linzDescribe(in, linzOutput{}), c.m.Name, err)
		}
		// It may or may not have applied: it never returns.
		out.Unknown, out.Err = true, err.Error()
		ret = math.MaxInt64
		delete(c.last, in.Key)
	}
	c.h.add(porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: out, Return: ret})
	return err
}

// linzDump writes the history, key by key in call order with the faults,
// to path and returns the keys whose history is not linearizable.
func linzDump(t *testing.T, model porcupine.Model, ops []porcupine.Operation, faults []porcupine.Annotation, path string) []string {
	var bad []string
	var b strings.Builder
	for _, part := range model.Partition(ops) {
		key := part[0].Input.(linzInput).Key
		ok := porcupine.CheckOperationsTimeout(model, part, 10*time.Second)
		if ok != porcupine.Ok {
			bad = append(bad, key)
		}
		fmt.Fprintf(&b, "== key %s: %v (%d operations)\n", key, ok, len(part))
		sorted := append([]porcupine.Operation(nil), part...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
		for _, op := range sorted {
			ret := "      +inf"
			if op.Return != math.MaxInt64 {
				ret = fmt.Sprintf("%10.6f", time.Duration(op.Return).Seconds())
			}
			fmt.Fprintf(&b, "%10.6f %s c%d %s\n", time.Duration(op.Call).Seconds(), ret, op.ClientId,
				linzDescribe(op.Input.(linzInput), op.Output.(linzOutput)))
		}
	}
	b.WriteString("== faults\n")
	for _, f := range faults {
		fmt.Fprintf(&b, "%10.6f %10.6f %s\n", time.Duration(f.Start).Seconds(), time.Duration(f.End).Seconds(), f.Description)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("write %s: %v", path, err)
	}
	return bad
}

// The model itself: it accepts what a register with revisions allows and
// refuses a stale read, a wrong compare-and-set outcome and a revision
// that does not grow.
func TestClusterKVLinearizableModel(t *testing.T) {
	t.Parallel()
	inf := int64(math.MaxInt64)
	put := func(v string) linzInput { return linzInput{Kind: linzPut, Key: "k", Value: v} }
	get := linzInput{Kind: linzGet, Key: "k"}
	cas := func(ev string, er uint64, v string) linzInput {
		return linzInput{Kind: linzCAS, Key: "k", Value: v, ExpPresent: ev != "", ExpValue: ev, ExpRev: er}
	}
	ok := func(rev uint64) linzOutput { return linzOutput{Rev: rev} }
	saw := func(v string, rev uint64) linzOutput { return linzOutput{Present: true, Value: v, Rev: rev} }
	op := func(c int, in linzInput, call int64, out linzOutput, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"read after write", []porcupine.Operation{op(0, put("a"), 0, ok(5), 10), op(1, get, 11, saw("a", 5), 12)}, porcupine.Ok},
		{"read concurrent with write", []porcupine.Operation{op(0, put("a"), 0, ok(5), 10), op(1, get, 1, linzOutput{}, 2)}, porcupine.Ok},
		{"stale read", []porcupine.Operation{op(0, put("a"), 0, ok(5), 10), op(0, put("b"), 11, ok(7), 20), op(1, get, 21, saw("a", 5), 22)}, porcupine.Illegal},
		{"unknown write seen", []porcupine.Operation{op(0, put("a"), 0, linzOutput{Unknown: true}, inf), op(1, get, 5, saw("a", 9), 6)}, porcupine.Ok},
		{"unknown write seen, then its revision", []porcupine.Operation{op(0, put("a"), 0, linzOutput{Unknown: true}, inf), op(1, get, 5, saw("a", 9), 6), op(1, get, 7, saw("a", 8), 8)}, porcupine.Illegal},
		{"cas applies", []porcupine.Operation{op(0, put("a"), 0, ok(5), 1), op(1, cas("a", 5, "b"), 2, ok(6), 3), op(0, get, 4, saw("b", 6), 5)}, porcupine.Ok},
		{"cas on absent", []porcupine.Operation{op(1, cas("", 0, "b"), 2, ok(6), 3), op(0, put("a"), 4, ok(7), 5), op(1, cas("", 0, "c"), 6, linzOutput{Refused: true}, 7)}, porcupine.Ok},
		{"cas refused wrongly", []porcupine.Operation{op(0, put("a"), 0, ok(5), 1), op(1, cas("a", 5, "b"), 2, linzOutput{Refused: true}, 3)}, porcupine.Illegal},
		{"cas applied wrongly", []porcupine.Operation{op(0, put("a"), 0, ok(5), 1), op(0, put("b"), 2, ok(7), 3), op(1, cas("a", 5, "c"), 4, ok(9), 5)}, porcupine.Illegal},
		{"revision shrinks", []porcupine.Operation{op(0, put("a"), 0, ok(5), 1), op(0, put("b"), 2, ok(4), 3)}, porcupine.Illegal},
		{"revision differs", []porcupine.Operation{op(0, put("a"), 0, ok(5), 1), op(1, get, 2, saw("a", 6), 3)}, porcupine.Illegal},
	} {
		if got := porcupine.CheckOperationsTimeout(linzModel(), tc.ops, 0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	stale := []porcupine.Operation{op(0, put("a"), 0, ok(5), 10), op(0, put("b"), 11, ok(7), 20), op(1, get, 21, saw("a", 5), 22), op(1, get, 15, saw("a", 5), 16)}
	if got := linzStaleReads(stale); len(got) != 1 {
		t.Errorf("stale reads: %q, want the one read after b's write", got)
	}

	// Every unknown write is kept, seen by a read or not.
	h := &linzHistory{ops: []porcupine.Operation{
		op(0, put("a"), 0, linzOutput{Unknown: true}, inf),
		op(0, put("b"), 1, linzOutput{Unknown: true}, inf),
		op(1, get, 2, saw("b", 3), 4),
	}}
	ops, st := h.prepare()
	if len(ops) != 3 || st.unknownDropped != 1 || st.unknownKept != 1 {
		t.Errorf("prepare kept %d operations (%s), want 3 (2 unknown: 1 unseen, 1 seen)", len(ops), st)
	}
	// An unseen unknown write explains a compare-and-set refused although
	// the key was, as far as any read saw, at the revision it expected.
	explained := []porcupine.Operation{
		op(0, put("a"), 0, ok(5), 1),
		op(1, get, 2, saw("a", 5), 3),
		op(2, put("x"), 4, linzOutput{Unknown: true}, inf),
		op(1, cas("a", 5, "c"), 6, linzOutput{Refused: true}, 7),
	}
	if got := porcupine.CheckOperationsTimeout(linzModel(), explained, 0); got != porcupine.Ok {
		t.Errorf("a refusal explained by an unseen unknown write: %v, want Ok", got)
	}
}

// linzStaleReads finds the plainest violations: a read that returned a
// key at a lower revision (or absent) although a write of that key at a
// higher revision had been acknowledged before the read began. Revisions
// are raft indexes, so such a read missed a completed write.
func linzStaleReads(ops []porcupine.Operation) []string {
	type write struct {
		ret int64
		rev uint64
		op  porcupine.Operation
	}
	writes := map[string][]write{}
	for _, op := range ops {
		in, out := op.Input.(linzInput), op.Output.(linzOutput)
		if in.Kind != linzGet && !out.Unknown && !out.Refused {
			writes[in.Key] = append(writes[in.Key], write{op.Return, out.Rev, op})
		}
	}
	// For each key, the acknowledged writes by return time, with the
	// highest revision acknowledged so far.
	best := map[string][]write{}
	for k, ws := range writes {
		sort.Slice(ws, func(i, j int) bool { return ws[i].ret < ws[j].ret })
		for i := 1; i < len(ws); i++ {
			if ws[i-1].rev > ws[i].rev {
				ws[i].rev, ws[i].op = ws[i-1].rev, ws[i-1].op
			}
		}
		best[k] = ws
	}
	var out []string
	for _, op := range ops {
		in, o := op.Input.(linzInput), op.Output.(linzOutput)
		if in.Kind != linzGet {
			continue
		}
		ws := best[in.Key]
		i := sort.Search(len(ws), func(i int) bool { return ws[i].ret >= op.Call }) - 1
		if i < 0 || (o.Present && ws[i].rev <= o.Rev) {
			continue
		}
		w := ws[i].op
		out = append(out, fmt.Sprintf("stale read: c%d %s [%.6fs–%.6fs], but c%d %s had returned at %.6fs",
			op.ClientId, linzDescribe(in, o), time.Duration(op.Call).Seconds(), time.Duration(op.Return).Seconds(),
			w.ClientId, linzDescribe(w.Input.(linzInput), w.Output.(linzOutput)), time.Duration(w.Return).Seconds()))
	}
	return out
}
