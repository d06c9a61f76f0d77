package automanager

import "testing"

// ReadApplySummary decodes a job's own bytes: it must never panic, and
// what it returns is well formed.
func FuzzReadApplySummary(f *testing.F) {
	f.Add([]byte(`{"applied":["frames"],"failed":[{"id":"captions","reason":"no decoder"}],"skewMs":3.5}`))
	f.Add([]byte(`{"failed":[{"id":7},"x",{"reason":"r"}],"skewMs":"1"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := ReadApplySummary(b)
		if s == nil {
			return
		}
		for _, f := range s.GetFailed() {
			if f == nil {
				t.Fatal("a nil failure")
			}
		}
	})
}
