package tests

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// writeLoad writes KV keys through the running members, one after another,
// and records every write a member acknowledged.
type writeLoad struct {
	c      *testcluster.Cluster
	ns     string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	acked   []string
	failed  int
	written int
	errs    []string
}

func startWriteLoad(t *testing.T, c *testcluster.Cluster, ns string) *writeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writeLoad{c: c, ns: ns, cancel: cancel, done: make(chan struct{})}
	// One writer per full member (a member cut off only slows its own).
	var wg sync.WaitGroup
	started := map[string]bool{}
	startWriter := func(m *testcluster.Member) {
		started[m.Name] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				cl := m.Client()
				if cl == nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				key := fmt.Sprintf("%s-%06d", m.Name, i)
				wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := cl.KvCommit(wctx, ns, []norsk.KvWrite{{Key: key, Value: []byte(m.Name)}}, norsk.KvCommitOptions{})
				wcancel()
				if ctx.Err() != nil {
					return // stopped: the write's outcome is unknown, not failed
				}
				w.mu.Lock()
				w.written++
				if err == nil {
					w.acked = append(w.acked, key)
				} else {
					w.failed++
					if w.failed <= 5 {
						w.errs = append(w.errs, m.Name+": "+err.Error())
					}
				}
				w.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	go func() {
		defer close(w.done)
		defer wg.Wait()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for _, m := range c.Members {
				if !m.Witness && !started[m.Name] {
					startWriter(m)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *writeLoad) stop() {
	w.cancel()
	<-w.done
}

// ackedCount is how many writes were acknowledged so far.
func (w *writeLoad) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// waitAcked waits until n more writes than now have been acknowledged.
func (w *writeLoad) waitMore(t *testing.T, n int) {
	t.Helper()
	target := w.ackedCount() + n
	w.c.Eventually(fmt.Sprintf("%d acknowledged writes", target), func() bool { return w.ackedCount() >= target })
}

// checkEverywhere stops the load and checks that every acknowledged write
// is on every running member (each member's own copy, once caught up).
func (w *writeLoad) checkEverywhere(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	acked := append([]string(nil), w.acked...)
	t.Logf("writes: %d acknowledged, %d failed of %d (first errors: %q)", len(acked), w.failed, w.written, w.errs)
	w.mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("no write was acknowledged")
	}
	for _, m := range w.c.Members {
		if m.Client() == nil {
			continue
		}
		var missing []string
		w.c.Eventually(fmt.Sprintf("member %s to hold every acknowledged write", m.Name), func() bool {
			have := map[string]bool{}
			if m.Witness {
				// A witness serves no API: read its copy directly.
				m.Server().Store().State().Snapshot().KVList(nil, w.ns, "", func(r *storev1.KvRecord) bool {
					have[r.GetEntry().GetKey()] = true
					return true
				})
			} else {
				entries, _, err := m.Client().KvList(context.Background(), w.ns, "")
				if err != nil {
					return false
				}
				for _, e := range entries {
					have[e.GetKey()] = true
				}
			}
			missing = missing[:0]
			for _, k := range acked {
				if !have[k] {
					missing = append(missing, k)
				}
			}
			return len(missing) == 0
		})
	}
}

// termWatch records which members led in which raft term.
type termWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	leads  map[uint64]map[string]bool
}

func watchTerms(t *testing.T, c *testcluster.Cluster) *termWatch {
	ctx, cancel := context.WithCancel(context.Background())
	tw := &termWatch{cancel: cancel, done: make(chan struct{}), leads: map[uint64]map[string]bool{}}
	go func() {
		defer close(tw.done)
		for ctx.Err() == nil {
			for _, m := range c.Members {
				s := m.Server()
				if s == nil {
					continue
				}
				st := s.Store()
				if st == nil {
					continue
				}
				before := st.Term()
				leader := st.IsLeader()
				after := st.Term()
				if leader && before == after {
					tw.mu.Lock()
					if tw.leads[before] == nil {
						tw.leads[before] = map[string]bool{}
					}
					tw.leads[before][m.Name] = true
					tw.mu.Unlock()
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(tw.stop)
	return tw
}

func (tw *termWatch) stop() {
	tw.cancel()
	<-tw.done
}

// check fails the test if two members led in one term.
func (tw *termWatch) check(t *testing.T) {
	t.Helper()
	tw.stop()
	tw.mu.Lock()
	defer tw.mu.Unlock()
	for term, ms := range tw.leads {
		if len(ms) > 1 {
			t.Errorf("term %d had %d primaries: %v", term, len(ms), ms)
		}
	}
	t.Logf("terms with a primary: %d", len(tw.leads))
}

// names are the names of members.
func names(ms ...*testcluster.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// others are the cluster's members but m.
func others(c *testcluster.Cluster, m *testcluster.Member) []*testcluster.Member {
	var out []*testcluster.Member
	for _, o := range c.Members {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

// api is a raw Manager client of member m (for the cluster calls).
func api(c *testcluster.Cluster, m *testcluster.Member) managerv1connect.ManagerClient {
	return managerv1connect.NewManagerClient(http.DefaultClient, m.URL(), connect.WithGRPCWeb(), connect.WithInterceptors(bearerToken(c.Token())))
}

type bearerToken string

func (b bearerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}
func (b bearerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (b bearerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// clusterStatus asks member m for the cluster's status.
func clusterStatus(t *testing.T, c *testcluster.Cluster, m *testcluster.Member) *managerv1.ClusterStatus {
	t.Helper()
	res, err := api(c, m).GetClusterStatus(context.Background(), connect.NewRequest(&managerv1.GetClusterStatusRequest{}))
	if err != nil {
		t.Fatalf("cluster status from %s: %v", m.Name, err)
	}
	return res.Msg
}

// waitNewPrimary waits for a primary among ms and returns it (dumping
// every member's view if none comes).
func waitNewPrimary(t *testing.T, c *testcluster.Cluster, ms []*testcluster.Member) *testcluster.Member {
	t.Helper()
	deadline := time.Now().Add(testcluster.WaitTimeout)
	for time.Now().Before(deadline) {
		for _, m := range ms {
			if s := m.Server(); s != nil && s.IsPrimaryReady() {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, m := range c.Members {
		s := m.Server()
		if s == nil {
			t.Logf("%s: stopped", m.Name)
			continue
		}
		st := s.Store()
		leader, _ := st.Leader()
		stats := st.Stats()
		t.Logf("%s: state %s term %s leader %q ready %v commit %d applied %d config %s", m.Name, stats["state"], stats["term"], leader,
			s.IsPrimaryReady(), st.CommitIndex(), st.AppliedIndex(), stats["latest_configuration"])
	}
	t.Fatalf("no primary among %v after %s", names(ms...), testcluster.WaitTimeout)
	return nil
}
