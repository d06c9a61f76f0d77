package testimage

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"go.uber.org/goleak"

	"github.com/norsk-go/norsk-manager/internal/runtime/runtimetest"
)

// selfTestTag is this package's own tag, apart from the tags other
// packages' tests build, so that test processes running side by side do not
// rebuild each other's images.
const selfTestTag = "norsk-testimage-selftest:test"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBuildAndRun(t *testing.T) {
	cli := EnsureImage(t, selfTestTag, runtimetest.TestProgPackage)
	again := EnsureImage(t, selfTestTag, runtimetest.TestProgPackage) // built once
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	img, err := again.ImageInspect(ctx, selfTestTag)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(img.Config.Entrypoint, []string{"/prog"}) || img.Config.Labels["norsk.manager/test-image"] != runtimetest.TestProgPackage {
		t.Errorf("image config: entrypoint %v, labels %v", img.Config.Entrypoint, img.Config.Labels)
	}

	created, err := cli.ContainerCreate(ctx, &container.Config{Image: selfTestTag, Cmd: []string{"-exit", "7", "-run", "1ms"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := cli.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	select {
	case res := <-waitC:
		if res.StatusCode != 7 {
			t.Errorf("exit code %d, want 7", res.StatusCode)
		}
	case err := <-errC:
		t.Fatal(err)
	}
}

func TestBuildReportsGoBuildErrors(t *testing.T) {
	cli := Engine(t)
	err := Build(t.Context(), cli, "norsk-testimage-never:test", "github.com/norsk-go/norsk-manager/internal/no/such/package")
	if err == nil || !strings.Contains(err.Error(), "go build") {
		t.Fatalf("Build of a missing package = %v, want a go build error", err)
	}
}

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
	r, err := contextTar(bin)
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
	if got[binaryName] != "binary" || !strings.HasPrefix(got["Dockerfile"], "FROM scratch\n") || !strings.Contains(got["Dockerfile"], `ENTRYPOINT ["/prog"]`) {
		t.Errorf("build context = %v", got)
	}
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o755)
}
