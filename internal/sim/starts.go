package sim

import (
	"slices"
	"sync"
)

// startBook counts, per instance (job id and role), the fencing tokens the
// fleet started it under and on which nodes: an instance that a failover
// or a re-placement started a second time shows up with two.
type startBook struct {
	mu         sync.Mutex
	byInstance map[string]*startRecord
	total      int
}

type startRecord struct {
	tokens []uint64
	nodes  []string
}

func (b *startBook) add(k instKey, token uint64, nodeID string) {
	id := k.String()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.byInstance[id]
	if r == nil {
		r = &startRecord{}
		b.byInstance[id] = r
	}
	r.tokens = append(r.tokens, token)
	r.nodes = append(r.nodes, nodeID)
	b.total++
}

// Starts is what the fleet started.
type Starts struct {
	// Instances is how many distinct instances were started; Total how many
	// starts there were (equal when none was started twice).
	Instances, Total int
	// Twice names the instances started more than once, sorted, each with
	// its tokens and nodes in the order of the starts.
	Twice []Repeat
}

// Repeat is an instance started more than once.
type Repeat struct {
	Instance string
	Tokens   []uint64
	Nodes    []string
}

// Starts returns the fleet's count of starts.
func (f *Fleet) Starts() Starts {
	b := &f.starts
	b.mu.Lock()
	defer b.mu.Unlock()
	out := Starts{Instances: len(b.byInstance), Total: b.total}
	for id, r := range b.byInstance {
		if len(r.tokens) > 1 {
			out.Twice = append(out.Twice, Repeat{Instance: id, Tokens: slices.Clone(r.tokens), Nodes: slices.Clone(r.nodes)})
		}
	}
	slices.SortFunc(out.Twice, func(a, b Repeat) int {
		switch {
		case a.Instance < b.Instance:
			return -1
		case a.Instance > b.Instance:
			return 1
		}
		return 0
	})
	return out
}
