package manager_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/auditchain"
)

// TestStoreKvConcurrentReadModifyWrite: N clients increment one counter by
// read-modify-write with expected_revision through the API. Optimistic
// concurrency must never let two writes succeed against the same revision,
// and the counter must end equal to the number of successful writes.
func TestStoreKvConcurrentReadModifyWrite(t *testing.T) {
	t.Parallel()
	const (
		clients  = 16
		attempts = 25
		ns, key  = "counters", "hits"
	)
	_, c := stStart(t, stConfig(t.TempDir(), nil))
	ctx := stCtx(t)

	type success struct {
		expected, revision uint64
		value              int
	}
	var (
		mu        sync.Mutex
		successes []success
		conflicts int
		wg        sync.WaitGroup
	)
	errs := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			for range attempts {
				got, err := c.KvGet(ctx, connect.NewRequest(&managerv1.KvGetRequest{Namespace: ns, Key: key}))
				if err != nil {
					errs <- err
					return
				}
				var (
					n   int
					exp uint64 // 0: the key must not exist yet
				)
				if e := got.Msg.GetEntry(); e != nil {
					n, err = strconv.Atoi(string(e.GetValue()))
					if err != nil {
						errs <- err
						return
					}
					exp = e.GetRevision()
				}
				res, err := c.KvCommit(ctx, connect.NewRequest(&managerv1.KvCommitRequest{Namespace: ns, Writes: []*managerv1.KvWrite{{
					Key: key, Op: &managerv1.KvWrite_Put{Put: []byte(strconv.Itoa(n + 1))}, ExpectedRevision: &exp,
				}}}))
				mu.Lock()
				switch {
				case err == nil:
					successes = append(successes, success{expected: exp, revision: res.Msg.GetRevision(), value: n + 1})
				case stCode(err) == connect.CodeFailedPrecondition:
					conflicts++
				default:
					mu.Unlock()
					errs <- err
					return
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("unexpected error: %v", err)
	}
	if len(successes)+conflicts != clients*attempts {
		t.Fatalf("%d successes + %d conflicts != %d attempts", len(successes), conflicts, clients*attempts)
	}
	byExpected := map[uint64]success{}
	byValue := map[int]bool{}
	byRevision := map[uint64]bool{}
	var maxRev uint64
	for _, s := range successes {
		if prev, dup := byExpected[s.expected]; dup {
			t.Errorf("two writes succeeded against revision %d: %+v and %+v", s.expected, prev, s)
		}
		byExpected[s.expected] = s
		if byValue[s.value] {
			t.Errorf("value %d was written twice", s.value)
		}
		byValue[s.value] = true
		byRevision[s.revision] = true
		maxRev = max(maxRev, s.revision)
	}
	final, err := c.KvGet(ctx, connect.NewRequest(&managerv1.KvGetRequest{Namespace: ns, Key: key}))
	if err != nil {
		t.Fatal(err)
	}
	e := final.Msg.GetEntry()
	if got, _ := strconv.Atoi(string(e.GetValue())); got != len(successes) {
		t.Errorf("counter = %d, want the %d successful writes", got, len(successes))
	}
	if e.GetRevision() != maxRev {
		t.Errorf("final revision %d, want the last success's %d", e.GetRevision(), maxRev)
	}
	// The successes form one chain: each expected the revision the one
	// before it wrote.
	next := uint64(0)
	for range successes {
		s, ok := byExpected[next]
		if !ok {
			t.Fatalf("no success expected revision %d: the chain is broken", next)
		}
		next = s.revision
	}
	// Under concurrency too, every success left one audit entry and no
	// refusal did; the chain's entries follow the writes' revisions.
	log := stAuditLog(t, c)
	var kvEntries []uint64
	for _, e := range log.GetEntries() {
		if e.GetKind() == "KvCommit" {
			var p stAPIPayload
			if err := json.Unmarshal([]byte(e.GetPayload()), &p); err != nil {
				t.Fatal(err)
			}
			kvEntries = append(kvEntries, p.Index)
		}
	}
	if len(kvEntries) != len(successes) {
		t.Errorf("%d KvCommit audit entries, %d successful commits", len(kvEntries), len(successes))
	}
	for _, idx := range kvEntries {
		if _, ok := byRevision[idx]; !ok {
			t.Errorf("audit entry at index %d matches no successful commit", idx)
		}
	}
	entries := slices.Clone(log.GetEntries())
	slices.Reverse(entries)
	if err := auditchain.Verify(log.GetCheckpoint(), entries); err != nil {
		t.Errorf("chain: %v", err)
	}
	t.Logf("%d clients x %d attempts: %d successes, %d conflicts", clients, attempts, len(successes), conflicts)
	if len(successes) == 0 || conflicts == 0 {
		t.Logf("note: no contention observed (successes %d, conflicts %d)", len(successes), conflicts)
	}
}
