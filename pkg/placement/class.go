package placement

import (
	"encoding/binary"
	"slices"
)

// nodeClass is a set of nodes alike in everything but their ID: for one
// request the static rules (save pin and exclusion), the static rank and
// the index's grouping treat them alike, and the dynamic rules too while
// no allocation holds them.
type nodeClass struct {
	rep   int32   // the lowest node of the class
	nodes []int32 // ascending
	// unavailable: the nodes are Node.Unavailable, refused by exclusion
	// for every request (each node says why; the class only that).
	unavailable bool
}

// classify groups the State's nodes into classes.
func (s *State) classify() {
	byKey := map[string]int32{}
	s.classOf = make([]int32, len(s.nodes))
	var b []byte
	var keys []string
	for i := range s.nodes {
		b, keys = s.classKey(b[:0], keys[:0], int32(i))
		c, ok := byKey[string(b)]
		if !ok {
			c = int32(len(s.classes))
			byKey[string(b)] = c
			s.classes = append(s.classes, nodeClass{rep: int32(i), unavailable: s.nodes[i].Unavailable != ""})
		}
		s.classes[c].nodes = append(s.classes[c].nodes, int32(i))
		s.classOf[i] = c
	}
}

// classKey appends to b everything of node ni the static rules, the static
// rank, the grouping and the dynamic rules read: every field but the ID,
// and of Unavailable whether it is set (its reason is read per node, in
// explanations only). Each string is written after its length, so
// distinct nodes never share a key.
// keys is scratch space for the attribute names.
func (s *State) classKey(b []byte, keys []string, ni int32) ([]byte, []string) {
	n := &s.nodes[ni]
	q := func(v string) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	num(int64(n.VCPUs))
	q(n.Pool)
	q(n.Zone)
	q(n.Cloud)
	q(n.Runtime)
	for k := range n.Attributes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	num(int64(len(keys)))
	for _, k := range keys {
		q(k)
		q(n.Attributes[k])
	}
	num(int64(len(n.gpuCap)))
	for i := range n.gpuCap {
		q(n.GPUs[i].Model)
		num(n.gpuCap[i])
	}
	for _, c := range s.capTotal[int(ni)*s.ncap : int(ni+1)*s.ncap] {
		num(c)
	}
	var flags int64 // spare, exclusive, unavailable
	if n.Spare.Enabled {
		flags |= 1
	}
	if n.Spare.Exclusive {
		flags |= 2
	}
	if n.Unavailable != "" {
		flags |= 4
	}
	num(flags)
	for _, list := range [][]string{n.Spare.ReservedFor, n.Spare.WarmFor, n.Images} {
		num(int64(len(list)))
		for _, v := range list {
			q(v)
		}
	}
	return b, keys
}
