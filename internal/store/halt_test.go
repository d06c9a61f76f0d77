package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// waitFor polls cond until it holds or the deadline passes (a condition
// the test waits for, not a timing it asserts).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowerHaltsOnDamagedEntry: the checksum is verified on followers
// too. A follower whose copy of an entry is altered (here on its way into
// its log) stops applying there and says so, instead of applying the
// altered command and silently diverging from the others; it leaves the
// cluster (raft shut down), which carries on; and at its next boot the
// store is unreadable, naming the entry, so the Manager rejoins it with a
// fresh copy.
func TestFollowerHaltsOnDamagedEntry(t *testing.T) {
	t.Parallel()
	var poisoned atomic.Uint64
	cfg := func(id string, join bool) Config {
		c := Config{Dir: t.TempDir(), MemberID: id, RaftBind: "127.0.0.1:0", Join: join, SnapshotThreshold: 1 << 20}
		if id == "m3" {
			c.logHook = func(logs []*raft.Log) {
				for _, l := range logs {
					if i := bytes.Index(l.Data, []byte("poison")); i >= 0 && l.Type == raft.LogCommand {
						l.Data[i] = 'P' // the follower's copy differs by one byte
						poisoned.Store(l.Index)
					}
				}
			}
		}
		return c
	}
	m1 := mustOpen(t, cfg("m1", false))
	defer m1.Close()
	c3 := cfg("m3", true)
	m2, m3 := mustOpen(t, cfg("m2", true)), mustOpen(t, c3)
	defer m2.Close()
	defer m3.Close()
	for _, m := range []*Store{m2, m3} {
		if err := m1.AddVoter(m.MemberID(), m.Addr()); err != nil {
			t.Fatalf("add %s: %v", m.MemberID(), err)
		}
	}
	ctx := context.Background()
	if _, err := m1.Apply(ctx, kvPut("before", []byte("ok"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m3 to apply the first write", func() bool { return string(kvGet(m3, "before")) == "ok" })

	res, err := m1.Apply(ctx, kvPut("victim", []byte("poison")))
	if err != nil {
		t.Fatalf("the write the follower gets damaged: %v", err)
	}
	waitFor(t, "m3 to store the damaged entry", func() bool { return poisoned.Load() != 0 })
	if poisoned.Load() != res.Index {
		t.Fatalf("damaged entry %d, the write was %d", poisoned.Load(), res.Index)
	}
	waitFor(t, "m3 to halt or apply", func() bool { return m3.Halted() != nil || kvGet(m3, "victim") != nil })
	if v := kvGet(m3, "victim"); v != nil {
		t.Fatalf("regression: follower m3 applied its damaged copy of entry %d (victim = %q, the primary has \"poison\"): "+
			"commands carry no checksum, so a follower's altered copy silently diverges", res.Index, v)
	}
	halt := m3.Halted()
	if want := fmt.Sprintf("entry %d", res.Index); !strings.Contains(halt.Error(), want) {
		t.Errorf("halt reason %q does not name %s", halt, want)
	}
	if got := m3.State().Snapshot().Index(); got >= res.Index {
		t.Errorf("m3's state is at index %d, past the damaged entry %d", got, res.Index)
	}
	if _, err := m3.Apply(ctx, kvPut("x", []byte("y"))); !apierr.Is(err, apierr.DataLoss) {
		t.Errorf("a write on the halted member: %v, want DATA_LOSS", err)
	}
	if err := m3.WaitApplied(ctx, res.Index); !apierr.Is(err, apierr.DataLoss) {
		t.Errorf("WaitApplied on the halted member: %v, want DATA_LOSS", err)
	}

	// The others carry on: they applied the real command, and commit more.
	for _, m := range []*Store{m1, m2} {
		if err := m.WaitApplied(ctx, res.Index); err != nil {
			t.Fatal(err)
		}
		if v := string(kvGet(m, "victim")); v != "poison" {
			t.Errorf("%s: victim = %q", m.MemberID(), v)
		}
	}
	if _, err := m1.Apply(ctx, kvPut("after", []byte("ok"))); err != nil {
		t.Fatalf("the cluster without the halted member: %v", err)
	}
	waitFor(t, "raft to stop on m3", func() bool { return m3.raft.State() == raft.Shutdown })

	// At its next boot the damaged store is refused, naming the entry.
	if err := m3.Close(); err != nil {
		t.Fatal(err)
	}
	c3.logHook = nil
	_, err = openCfg(t, c3)
	if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), fmt.Sprintf("entry %d", res.Index)) {
		t.Fatalf("reopening the damaged follower: %v, want ErrUnreadable naming entry %d", err, res.Index)
	}
}
