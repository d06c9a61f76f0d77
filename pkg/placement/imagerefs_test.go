package placement

import (
	"fmt"
	"sync"
	"testing"
)

func TestNormalizeImageRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"nginx", "docker.io/library/nginx:latest"},
		{"nginx:1.27", "docker.io/library/nginx:1.27"},
		{"127.0.0.1:5000/norsk/media:dev", "127.0.0.1:5000/norsk/media:dev"},
		{"localhost:5000/norsk/media", "localhost:5000/norsk/media:latest"},
		{"ghcr.io/acme/enc@sha256:" + fmt.Sprintf("%064d", 0), "ghcr.io/acme/enc@sha256:" + fmt.Sprintf("%064d", 0)},
		{"Not A Reference", "Not A Reference"}, // does not parse: matches only itself
	} {
		// Asked twice: the second answer comes from the memo.
		for i := range 2 {
			if got := NormalizeImageRef(tc.in); got != tc.want {
				t.Errorf("NormalizeImageRef(%q) #%d = %q, want %q", tc.in, i+1, got, tc.want)
			}
		}
	}
}

// Past maxImageRefs distinct references the memo starts again: it never
// holds more, and every answer is still the parsed one.
func TestImageRefMemoIsBounded(t *testing.T) {
	m := refMemo{m: map[string]string{}}
	for i := range 3 * maxImageRefs {
		ref := fmt.Sprintf("registry.local/img-%d:v1", i)
		m.put(ref, normalizeImageRef(ref))
		if len(m.m) > maxImageRefs {
			t.Fatalf("%d references held, the bound is %d", len(m.m), maxImageRefs)
		}
		if got, ok := m.get(ref); !ok || got != ref {
			t.Fatalf("get(%q) = %q, %v just after put", ref, got, ok)
		}
	}
}

// Placement converts jobs from several goroutines at once (the
// AutoManager, the saga, RPC handlers): run with -race.
func TestNormalizeImageRefConcurrent(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				ref := fmt.Sprintf("img-%d", (g*2000+i)%(maxImageRefs+100))
				if got, want := NormalizeImageRef(ref), "docker.io/library/"+ref+":latest"; got != want {
					t.Errorf("NormalizeImageRef(%q) = %q, want %q", ref, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
