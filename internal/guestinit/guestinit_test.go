package guestinit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/norsk-go/norsk-manager/internal/providers"
)

func TestRewriteUserData(t *testing.T) {
	t.Parallel()
	ud := providers.UserData{NodeID: "n1", Token: "nrt_x", CAHash: "sha256:00",
		ManagerURLs: []string{"http://127.0.0.1:6790", "https://localhost:7000", "http://[::1]:8000", "https://m1.example:6790", "http://127.0.0.1"}}
	raw := append(ud.Encode(), make([]byte, 300)...) // the disk's NUL padding
	out, err := RewriteUserData(raw, HostAddr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := providers.DecodeUserData(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "http://10.0.2.2:6790,https://10.0.2.2:7000,http://10.0.2.2:8000,https://m1.example:6790,http://10.0.2.2"
	if strings.Join(got.ManagerURLs, ",") != want || got.Token != "nrt_x" || got.CAHash != "sha256:00" || got.NodeID != "n1" {
		t.Errorf("rewritten: %+v; want URLs %s and the rest kept", got, want)
	}
	if _, err := RewriteUserData([]byte("#!/bin/sh\n"), HostAddr); err == nil {
		t.Error("data that is not a worker's user data was rewritten")
	}
}

func TestFindDiskAndCmdline(t *testing.T) {
	t.Parallel()
	sys := t.TempDir()
	for dev, serial := range map[string]string{"vda": "", "vdb": FirstBootSerial + "\x00\x00", "loop0": ""} {
		d := filepath.Join(sys, "block", dev)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if serial != "" {
			if err := os.WriteFile(filepath.Join(d, "serial"), []byte(serial), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := FindDisk(sys, FirstBootSerial); err != nil || got != "/dev/vdb" {
		t.Errorf("FindDisk = %q, %v", got, err)
	}
	if _, err := FindDisk(sys, "other"); err == nil {
		t.Error("a serial no disk has was found")
	}
	if c := ParseCmdline("console=ttyS0 norsk.hostfwd=127.0.0.1:4242 panic=-1\n"); c.Advertise != "127.0.0.1:4242" {
		t.Errorf("ParseCmdline = %+v", c)
	}
}
