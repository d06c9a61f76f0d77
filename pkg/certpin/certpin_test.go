package certpin

import (
	"strings"
	"testing"
)

func FuzzParseFingerprint(f *testing.F) {
	f.Add("sha256:" + strings.Repeat("ab", 32))
	f.Add("SHA256:" + strings.Repeat("AB:", 31) + "AB")
	f.Add("sha256:")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseFingerprint(s)
		if err != nil {
			return
		}
		if len(b) != 32 {
			t.Fatalf("%q parsed to %d bytes", s, len(b))
		}
		n, err := Normalize(s)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := Normalize(n); err != nil || again != n {
			t.Fatalf("Normalize is not idempotent: %q -> %q -> %q (%v)", s, n, again, err)
		}
	})
}

func TestClientConfigEmpty(t *testing.T) {
	c, err := ClientConfig(Options{})
	if c != nil || err != nil {
		t.Fatalf("empty options: %v %v", c, err)
	}
	if _, err := ClientConfig(Options{CAPEM: []byte("no pem here")}); err == nil {
		t.Fatal("a CA without a certificate was accepted")
	}
	if _, err := ClientConfig(Options{Fingerprint: "md5:00"}); err == nil {
		t.Fatal("a bad fingerprint was accepted")
	}
}
