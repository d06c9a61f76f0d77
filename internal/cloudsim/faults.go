package cloudsim

import "sync"

// Faults are the faults a test injects into a local cloud endpoint:
// throttled calls and launches refused for want of capacity. Each endpoint
// embeds one and answers them in its own cloud's words. Safe for
// concurrent use; its lock is a leaf (callers may hold their own).
type Faults struct {
	mu         sync.Mutex
	throttle   int
	noCapacity map[string]int // "type" or "type@zone" → refusals left (-1: always)
}

// Throttle answers the next n calls with the cloud's rate-limit error.
func (f *Faults) Throttle(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle = n
}

// NoCapacity refuses the next n launches of instance type (shape) typ in
// zone ("" = any zone) for want of capacity; n < 0: until Capacity.
func (f *Faults) NoCapacity(typ, zone string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := typ
	if zone != "" {
		key += "@" + zone
	}
	if f.noCapacity == nil {
		f.noCapacity = map[string]int{}
	}
	f.noCapacity[key] = n
}

// Capacity ends every NoCapacity.
func (f *Faults) Capacity() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noCapacity = nil
}

// TakeThrottle reports whether this call is throttled, counting it.
func (f *Faults) TakeThrottle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.throttle <= 0 {
		return false
	}
	f.throttle--
	return true
}

// TakeNoCapacity reports whether a launch of typ in zone is refused for
// want of capacity, counting it.
func (f *Faults) TakeNoCapacity(typ, zone string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range []string{typ + "@" + zone, typ} {
		if n, ok := f.noCapacity[key]; ok && n != 0 {
			if n > 0 {
				f.noCapacity[key] = n - 1
			}
			return true
		}
	}
	return false
}
