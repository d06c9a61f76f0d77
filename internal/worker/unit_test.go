package worker

import (
	"net"
	"testing"
	"time"
)

func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	b := backoff{min: 250 * time.Millisecond, max: 10 * time.Second}
	ceil := 250 * time.Millisecond
	for i := range 12 {
		d := b.next()
		if d < ceil/2 || d > ceil {
			t.Fatalf("attempt %d: %v not within [%v, %v]", i, d, ceil/2, ceil)
		}
		ceil = min(2*ceil, 10*time.Second)
	}
	b.reset()
	if d := b.next(); d > 250*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
}

func TestAdvertiseAddress(t *testing.T) {
	t.Parallel()
	if got := advertiseAddress("worker.example:7000", "127.0.0.1:1234", "http://m:1"); got != "worker.example:7000" {
		t.Fatal(got)
	}
	if got := advertiseAddress("", "127.0.0.1:1234", "http://127.0.0.1:1"); got != "127.0.0.1:1234" {
		t.Fatal(got)
	}
	got := advertiseAddress("", "0.0.0.0:1234", "http://127.0.0.1:6790")
	host, port, err := net.SplitHostPort(got)
	if err != nil || port != "1234" || host == "0.0.0.0" || host == "" {
		t.Fatalf("%q", got)
	}
}
