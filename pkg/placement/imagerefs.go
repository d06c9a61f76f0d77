package placement

import "sync"

// maxImageRefs bounds the references imageRefs remembers. A fleet's jobs
// name a few images each; past this many distinct ones the memo is
// emptied and refilled by what is asked next.
const maxImageRefs = 4096

// imageRefs remembers NormalizeImageRef's answers. Parsing a reference
// runs the registry grammar's regular expressions (microseconds, and
// garbage); every job's request is built from its images on every
// AutoManager pass, mirror rebuild and migration target placement, and a
// fleet of 100,000 jobs names a handful of images — parsing was a quarter
// of a full pass's CPU.
var imageRefs = refMemo{m: make(map[string]string)}

// refMemo is a bounded map of normalised references, safe for concurrent
// use (placement runs in the AutoManager, the saga and RPC handlers at
// once).
type refMemo struct {
	mu sync.RWMutex
	m  map[string]string
}

func (r *refMemo) get(ref string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n, ok := r.m[ref]
	return n, ok
}

func (r *refMemo) put(ref, normalized string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= maxImageRefs {
		clear(r.m)
	}
	r.m[ref] = normalized
}
