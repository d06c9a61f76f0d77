package placement

// The fast path's copy of the dynamic state. A placement scans every node
// a static entry holds; reading each node's CPU and capability counts from
// the State's per-node tables strides through memory, which at thousands
// of nodes is most of a placement's cost. So each entry keeps, in
// position order beside its nodes, the free CPU of each node and the free
// count of each capability its shape consumes — contiguous, read in one
// sweep — and Commit and Remove keep them exact. Everything else a node's
// fitness depends on (exclusive cores, GPUs, a band's ceiling, co-location
// and separation) is rare, and read from the State as before.

// shadow is a static entry's copy of its nodes' free CPU and capabilities.
type shadow struct {
	posOf   []int32   // per State node: its position in the entry, -1 = not there (or set aside)
	cpuFree []int64   // per position: cpu capacity left (milli units)
	capIDs  []int32   // the capabilities the entry's shape consumes
	capNeed []int64   // and how many of each it needs
	capFree [][]int64 // per capIDs index, per position: count left
}

// initShadow builds e's shadow for shape p from the State's tables.
func (s *State) initShadow(e *staticEntry, p *prepared) {
	e.posOf = make([]int32, len(s.nodes))
	e.capIDs, e.capNeed = e.capIDs[:0], e.capNeed[:0]
	for _, c := range p.need.caps {
		if c.consume && c.id >= 0 {
			e.capIDs = append(e.capIDs, c.id)
			e.capNeed = append(e.capNeed, c.count)
		}
	}
	e.refill(s)
}

// refill recomputes the shadow from the State (after its nodes changed).
func (e *staticEntry) refill(s *State) {
	for i := range e.posOf {
		e.posOf[i] = -1
	}
	e.cpuFree = make([]int64, len(e.nodes))
	e.capFree = make([][]int64, len(e.capIDs))
	for k := range e.capFree {
		e.capFree[k] = make([]int64, len(e.nodes))
	}
	for i, ni := range e.nodes {
		e.posOf[ni] = int32(i)
		h := &s.hot[ni]
		e.cpuFree[i] = h.cpuCap - h.cpuUsed
		for k, id := range e.capIDs {
			e.capFree[k][i] = s.capFree[int(ni)*s.ncap+int(id)]
		}
	}
}

// account applies an allocation's need to node ni in every entry's
// shadow: sign -1 takes it (Commit), +1 gives it back (Remove).
func (s *State) account(ni int32, nd *need, sign int64) {
	for _, e := range s.static {
		i := e.posOf[ni]
		if i < 0 {
			continue
		}
		e.cpuFree[i] += sign * nd.demand
		for k, id := range e.capIDs {
			for _, c := range nd.caps {
				if c.consume && c.id == id {
					e.capFree[k][i] += sign * c.count
				}
			}
		}
	}
}

// slowFit: the request needs a check the shadow does not hold (exclusive
// cores, a GPU, a band's ceiling, co-location or separation). These are
// not part of an entry's key, so it is the request's, not the entry's.
func slowFit(p *prepared) bool {
	return p.need.cores > 0 || p.need.gpu > 0 || p.ceiling < 100 || len(p.coLocate) > 0 || len(p.separate) > 0
}

// fitsAt is fits for the node at position i, from the shadow (slow: see
// slowFit).
func (e *staticEntry) fitsAt(s *State, i int, ni int32, p *prepared, slow bool) bool {
	if e.cpuFree[i] < p.need.demand {
		return false
	}
	for k := range e.capIDs {
		if e.capFree[k][i] < e.capNeed[k] {
			return false
		}
	}
	return !slow || s.fits(ni, p)
}
