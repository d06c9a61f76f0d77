package nodes

import (
	"testing"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// node list's STATE column shows a drain's progress while it runs and its
// outcome after.
func TestNodeStateWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    *norsk.Node
		want string
	}{
		{&norsk.Node{State: norsk.NodeStateOnline, Connected: true}, "online"},
		{&norsk.Node{State: norsk.NodeStateOnline, Connected: true, Draining: true, Drain: &norsk.NodeDrain{State: norsk.DrainRunning, Moved: 3, Total: 7}}, "draining (3/7 moved)"},
		{&norsk.Node{State: norsk.NodeStateOnline, Connected: true, Draining: true, Drain: &norsk.NodeDrain{State: norsk.DrainDrained, Moved: 7, Total: 7}}, "drained"},
		{&norsk.Node{State: norsk.NodeStateOnline, Connected: true, Draining: true, Drain: &norsk.NodeDrain{State: norsk.DrainNotDrained, Moved: 5, Total: 7}}, "not drained (5/7 moved)"},
		{&norsk.Node{State: norsk.NodeStateOnline, Connected: true, Draining: true}, "draining"},
		{&norsk.Node{State: norsk.NodeStateOnline, Connected: true, Drain: &norsk.NodeDrain{State: norsk.DrainCancelled}}, "online"},
		{&norsk.Node{State: norsk.NodeStateLost, Draining: true, Drain: &norsk.NodeDrain{State: norsk.DrainRunning}}, "lost"},
	} {
		if got := nodeStateWords(tc.n); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.n, got, tc.want)
		}
	}
}
