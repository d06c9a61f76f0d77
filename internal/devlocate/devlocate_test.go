package devlocate

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLocalPort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, port string
		ok        bool
	}{
		{"http://127.0.0.1:6790", "6790", true},
		{"127.0.0.1:6840", "6840", true},
		{"http://localhost:6841/", "6841", true},
		{"http://[::1]:6842", "6842", true},
		{"http://0.0.0.0:6843", "6843", true},
		{"http://127.0.0.2:6844,http://10.0.0.1:6790", "6844", true},
		{"http://127.0.0.1", "80", true},
		{"https://manager.example.com:6790", "", false},
		{"http://10.1.2.3:6790", "", false},
		{"", "", false},
		{"http://", "", false},
	} {
		port, ok := localPort(tc.url)
		if ok != tc.ok || (ok && port != tc.port) {
			t.Errorf("localPort(%q) = %q, %v; want %q, %v", tc.url, port, ok, tc.port, tc.ok)
		}
	}
}

// A dev's record is found for every spelling of its loopback URL, not for
// another port or a remote host, and goes when the dev stops; the default
// URL falls back to the default data directory's token.
func TestRecordAndFind(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_DATA_HOME", home)
	if p, ok := TokenFileFor("http://127.0.0.1:6790"); ok {
		t.Fatalf("found %s with no dev", p)
	}

	tok := filepath.Join(t.TempDir(), TokenFileName)
	if err := os.WriteFile(tok, []byte("nmt_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remove, err := Record("http://127.0.0.1:6840", tok)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(Dir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the records' directory: %v, %v; want mode 0700", fi, err)
	}
	for _, u := range []string{"http://127.0.0.1:6840", "127.0.0.1:6840", "localhost:6840", "http://[::1]:6840"} {
		if p, ok := TokenFileFor(u); !ok || p != tok {
			t.Errorf("TokenFileFor(%q) = %q, %v; want %s", u, p, ok, tok)
		}
	}
	for _, u := range []string{"http://127.0.0.1:6841", "http://10.0.0.7:6840"} {
		if p, ok := TokenFileFor(u); ok {
			t.Errorf("TokenFileFor(%q) = %s; want none", u, p)
		}
	}
	remove()
	if p, ok := TokenFileFor("http://127.0.0.1:6840"); ok {
		t.Errorf("found %s after the dev stopped", p)
	}

	// The default URL: the default data directory's token.
	def := DefaultTokenFile()
	if err := os.MkdirAll(filepath.Dir(def), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(def, []byte("nmt_y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, ok := TokenFileFor("http://127.0.0.1:6790"); !ok || p != def {
		t.Errorf("TokenFileFor(default) = %q, %v; want %s", p, ok, def)
	}

	// A record whose token file is gone is no answer.
	remove, err = Record("http://127.0.0.1:6850", filepath.Join(t.TempDir(), "gone"))
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	if p, ok := TokenFileFor("http://127.0.0.1:6850"); ok {
		t.Errorf("found %s, a token file that does not exist", p)
	}
	// A URL not on loopback is not recorded.
	if _, err := Record("http://10.0.0.7:6860", tok); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(Dir(), "6860.json")); !os.IsNotExist(err) {
		t.Errorf("a remote URL was recorded: %v", err)
	}
}
