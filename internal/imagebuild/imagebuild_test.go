package imagebuild

import (
	"archive/tar"
	"io"
	"os"
	"strings"
	"testing"
)

func TestReadBuildOutput(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		wantErr string
	}{
		{"success", `{"stream":"Step 1/3 : FROM scratch\n"}{"stream":"Successfully built abc\n"}`, ""},
		{"engine error", `{"stream":"Step 1/3 : FROM scratch\n"}{"error":"boom","errorDetail":{"message":"boom detail"}}`, "boom detail"},
		{"error without detail", `{"error":"plain"}`, "plain"},
		{"garbage", `{"stream":`, "read build output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := readBuildOutput(strings.NewReader(tc.stream))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("readBuildOutput = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestContextTar(t *testing.T) {
	bin := t.TempDir() + "/prog"
	if err := writeFile(bin, "binary"); err != nil {
		t.Fatal(err)
	}
	r, err := contextTar(bin, "65534:65534")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(r)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
		if h.Name == binaryName && h.Mode&0o111 == 0 {
			t.Errorf("binary mode %o is not executable", h.Mode)
		}
	}
	if got[binaryName] != "binary" || !strings.HasPrefix(got["Dockerfile"], "FROM scratch\n") || !strings.Contains(got["Dockerfile"], `ENTRYPOINT ["/prog"]`) || !strings.Contains(got["Dockerfile"], "USER 65534:65534\n") {
		t.Errorf("build context = %v", got)
	}
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o755)
}

// The source digest is the same for the same source and recipe, and moves
// when a file of the program, or the image's user, changes.
func TestSourceDigest(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("go.mod", []byte("module example.com/prog\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	main := "package main\n\nfunc main() {}\n"
	if err := os.WriteFile("main.go", []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	digest := func(user string) string {
		t.Helper()
		d, err := SourceDigest(t.Context(), Spec{Tag: "x:dev", Package: ".", User: user})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest("")
	if !strings.HasPrefix(first, "sha256:") || digest("") != first {
		t.Fatalf("digest %q is not stable", first)
	}
	if digest("65534:65534") == first {
		t.Error("the digest does not cover the image's user")
	}
	if err := os.WriteFile("main.go", []byte(main+"// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if digest("") == first {
		t.Error("the digest did not change with the program's source")
	}
}
