package providers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodOverrides = `version: 1
aws:
  regions:
    eu-west-1:
      workerImages:
        "1.4.0": ami-0123456789abcdef0
        "1.5.0": ami-0123456789abcdef1
oci:
  regions:
    eu-frankfurt-1:
      workerImages:
        "1.4.0": ocid1.image.oc1.eu-frankfurt-1.aaaaaaaaworker
cloudHypervisor:
  regions:
    enc-01:
      workerImages:
        "1.4.0": norsk-worker-1.4.0
`

func TestParseOverrides(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, err string
	}{
		{"good", goodOverrides, ""},
		{"no version", "aws:\n  regions:\n    eu-west-1:\n      workerImages:\n        \"1\": ami-0123456789abcdef0\n", "version: 0"},
		{"unknown key", goodOverrides + "gcp: {}\n", "unknown field"},
		{"not yaml", "version: [", "yaml"},
		{"bad region", "version: 1\naws:\n  regions:\n    Europe:\n      workerImages:\n        \"1\": ami-0123456789abcdef0\n", "not a aws region name"},
		{"bad ami", "version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages:\n        \"1\": ocid1.image.oc1.x.y\n", "is not an AMI id"},
		{"bad ocid", "version: 1\noci:\n  regions:\n    eu-frankfurt-1:\n      workerImages:\n        \"1\": ami-0123456789abcdef0\n", "is not an image OCID"},
		{"no images", "version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages: {}\n", "at least one worker version"},
		{"no regions", "version: 1\naws:\n  regions: {}\n", "at least one region"},
		{"bad host", "version: 1\ncloudHypervisor:\n  regions:\n    Enc_01:\n      workerImages:\n        \"1\": w\n", "cloudHypervisor.regions.Enc_01: \"Enc_01\" is not a host name"},
		{"bad base image", "version: 1\ncloudHypervisor:\n  regions:\n    enc-01:\n      workerImages:\n        \"1\": /a/path\n", "is not a base image name"},
		{"bad version key", "version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages:\n        \"a b\": ami-0123456789abcdef0\n", "is not a worker version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOverrides([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := o.Regions("aws"); len(got) != 1 || got[0] != "eu-west-1" || !o.RunsRegion("oci", "eu-frankfurt-1") || o.RunsRegion("aws", "us-east-1") {
				t.Errorf("regions %v", got)
			}
			if img, err := o.Image("cloud-hypervisor", "enc-01", "1.4.0"); err != nil || img != "norsk-worker-1.4.0" {
				t.Errorf("cloud-hypervisor image = %q, %v", img, err)
			}
			if img, err := o.Image("aws", "eu-west-1", "1.5.0"); err != nil || img != "ami-0123456789abcdef1" {
				t.Errorf("image = %q, %v", img, err)
			}
			if _, err := o.Image("aws", "eu-west-1", "9.9.9"); !errors.Is(err, ErrNoImage) || !strings.Contains(err.Error(), "1.4.0, 1.5.0") {
				t.Errorf("no image: %v", err)
			}
			if _, err := o.Image("aws", "us-east-1", "1.4.0"); !errors.Is(err, ErrNoRegion) {
				t.Errorf("no region: %v", err)
			}
			if len(o.Digest) != 64 {
				t.Errorf("digest %q", o.Digest)
			}
		})
	}
}

func TestOverridesDiffAndRoundTrip(t *testing.T) {
	t.Parallel()
	old, err := ParseOverrides([]byte(goodOverrides))
	if err != nil {
		t.Fatal(err)
	}
	next, err := ParseOverrides([]byte(`version: 1
aws:
  regions:
    eu-west-1:
      workerImages:
        "1.4.0": ami-0123456789abcdef9
        "1.6.0": ami-0123456789abcdef6
    us-east-1:
      workerImages:
        "1.6.0": ami-0123456789abcdef7
`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(next.Diff(old), "\n")
	want := strings.Join([]string{
		"aws eu-west-1: worker image 1.4.0 changed from ami-0123456789abcdef0 to ami-0123456789abcdef9",
		"aws eu-west-1: worker image 1.5.0 (ami-0123456789abcdef1) removed",
		"aws eu-west-1: worker image 1.6.0 = ami-0123456789abcdef6 added",
		"aws us-east-1: region added (1 worker images)",
		"cloud-hypervisor enc-01: region removed",
		"oci eu-frankfurt-1: region removed",
	}, "\n")
	if got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
	if d := old.Diff(old); len(d) != 0 {
		t.Errorf("a file against itself: %v", d)
	}
	if d := old.Diff(nil); len(d) != 3 {
		t.Errorf("against none: %v", d)
	}
	b, err := next.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseOverrides(b)
	if err != nil {
		t.Fatalf("marshalled file does not parse: %v\n%s", err, b)
	}
	if d := again.Diff(next); len(d) != 0 {
		t.Errorf("round trip changed %v", d)
	}
	path := filepath.Join(t.TempDir(), "o.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if o, err := LoadOverrides(path); err != nil || o.Path != path {
		t.Errorf("load: %v, %v", o, err)
	}
	if _, err := LoadOverrides(path + ".missing"); err == nil {
		t.Error("a missing file loaded")
	}
}

// FuzzParseOverrides: the overrides file is outside input; whatever it
// holds, parsing never panics, and what parses validates and round-trips.
func FuzzParseOverrides(f *testing.F) {
	f.Add([]byte(goodOverrides))
	f.Add([]byte("version: 1\n"))
	f.Add([]byte("version: 1\naws:\n  regions:\n    eu-west-1:\n      workerImages:\n        x: ami-00000000\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := ParseOverrides(b)
		if err != nil {
			return
		}
		out, err := o.Marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := ParseOverrides(out)
		if err != nil {
			t.Fatalf("a valid file does not round-trip: %v\n%s", err, out)
		}
		if d := again.Diff(o); len(d) != 0 {
			t.Fatalf("round trip changed %v", d)
		}
	})
}

func TestUserData(t *testing.T) {
	t.Parallel()
	ud := UserData{NodeID: "aws-1", ManagerURLs: []string{"https://m1:6790", "https://m2:6790"}, Token: "nrt_abc", CAHash: "sha256:00"}
	got, err := DecodeUserData(ud.Encode())
	if err != nil || got.NodeID != ud.NodeID || len(got.ManagerURLs) != 2 || got.Token != ud.Token || got.CAHash != ud.CAHash {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	// A microVM's raw first-boot disk: the user data padded with NULs.
	padded := append(ud.Encode(), make([]byte, 700)...)
	if got, err := DecodeUserData(padded); err != nil || got.NodeID != ud.NodeID {
		t.Fatalf("NUL-padded = %+v, %v", got, err)
	}
	for _, tc := range []struct{ name, data, err string }{
		{"no header", `{"nodeId":"a"}`, "not a Norsk worker's user data"},
		{"a shell script", "#!/bin/sh\necho hi\n", "not a Norsk worker's user data"},
		{"unknown field", UserDataHeader + "\n" + `{"nodeId":"a","token":"t","managerUrls":["http://m"],"extra":1}`, "unknown field"},
		{"no token", UserDataHeader + "\n" + `{"nodeId":"a","managerUrls":["http://m"]}`, "token is empty"},
		{"no node", UserDataHeader + "\n" + `{"token":"t","managerUrls":["http://m"]}`, "nodeId is empty"},
		{"no url", UserDataHeader + "\n" + `{"nodeId":"a","token":"t"}`, "managerUrls is empty"},
		{"bad url", UserDataHeader + "\n" + `{"nodeId":"a","token":"t","managerUrls":["m:6790"]}`, "not an http(s) URL"},
		{"two objects", UserDataHeader + "\n" + `{"nodeId":"a","token":"t","managerUrls":["http://m"]} {}`, "more than one"},
		{"too big", UserDataHeader + "\n" + strings.Repeat(" ", MaxUserData), "more than"},
	} {
		if _, err := DecodeUserData([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// FuzzDecodeUserData: user data is outside input to the worker; decoding
// never panics, and what decodes re-encodes to the same.
func FuzzDecodeUserData(f *testing.F) {
	f.Add(UserData{NodeID: "n", ManagerURLs: []string{"http://m:1"}, Token: "t"}.Encode())
	f.Add([]byte("#norsk-worker\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := DecodeUserData(b)
		if err != nil {
			return
		}
		again, err := DecodeUserData(u.Encode())
		if err != nil || again.NodeID != u.NodeID || again.Token != u.Token || strings.Join(again.ManagerURLs, ",") != strings.Join(u.ManagerURLs, ",") {
			t.Fatalf("re-encoded %+v: %+v, %v", u, again, err)
		}
	})
}
