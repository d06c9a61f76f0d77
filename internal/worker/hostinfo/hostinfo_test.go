package hostinfo

import "testing"

func TestParseMeminfo(t *testing.T) {
	t.Parallel()
	total, avail, err := parseMeminfo([]byte("MemTotal:       16384 kB\nMemFree:  100 kB\nMemAvailable:    4096 kB\n"))
	if err != nil || total != 16384*1024 || avail != 4096*1024 {
		t.Fatalf("%d %d %v", total, avail, err)
	}
	if _, _, err := parseMeminfo([]byte("nothing\n")); err == nil {
		t.Fatal("no MemTotal accepted")
	}
}

func TestCPUStat(t *testing.T) {
	t.Parallel()
	idle, total, ok := parseProcStatCPU([]byte("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n"))
	if !ok || idle != 800 || total != 1000 {
		t.Fatalf("%d %d %v", idle, total, ok)
	}
	if _, _, ok := parseProcStatCPU([]byte("intr 1 2\n")); ok {
		t.Fatal("parsed a non-cpu line")
	}
	var s CPU
	if p := s.Sample(); p < 0 || p > 100 {
		t.Fatalf("cpu %v", p)
	}
}
