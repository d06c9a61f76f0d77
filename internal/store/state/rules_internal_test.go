package state

import "testing"

// TestRulesFor: every schema version has the rules of the newest version at
// or below it that lists them, so a new SchemaVersion inherits the rules
// until it says otherwise.
func TestRulesFor(t *testing.T) {
	t.Parallel()
	for v := uint32(0); v <= SchemaVersion+2; v++ {
		want := rulesAt[0]
		for u := uint32(0); u <= v; u++ {
			if r, ok := rulesAt[u]; ok {
				want = r
			}
		}
		if got := rulesFor(v); got != want {
			t.Errorf("rulesFor(%d) = %+v, want %+v", v, got, want)
		}
	}
}
