// Package imagebuild builds small Docker images FROM scratch out of a Go
// main package of this module, so nothing ever has to be pulled: the build
// needs only the Go toolchain and the local engine. Dev mode uses it for the
// example images; tests use it through internal/testimage.
//
// The program is built with CGO_ENABLED=0 for linux and the engine's
// architecture, so it runs in an empty image; it must need no files from
// the image (no CA certificates, no time zone data, no shell).
package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// binaryName is the program's path inside the image.
const binaryName = "prog"

// Labels every image built here carries.
const (
	// LabelPackage is the Go package the image was built from.
	LabelPackage = "norsk.manager/test-image"
	// LabelSourceDigest is SourceDigest of the build: the image is out of
	// date once the package's source (or the Go toolchain, or the image's
	// recipe) changed.
	LabelSourceDigest = "norsk.manager/source-digest"
)

// Spec is an image to build.
type Spec struct {
	// Tag names the image, e.g. "norsk-examples/hello:dev".
	Tag string
	// Package is the Go main package (an import path or a path the go
	// command accepts, resolved from the current directory).
	Package string
	// User is the image's USER ("65534:65534"); empty: root.
	User string
}

// Build compiles goPackage and builds the image tag from it, running as
// root (BuildSpec).
func Build(ctx context.Context, cli *client.Client, tag string, goPackage string) error {
	return BuildSpec(ctx, cli, Spec{Tag: tag, Package: goPackage})
}

// UpToDate reports whether the image s.Tag exists and was built from the
// source s.Package has now (its LabelSourceDigest matches SourceDigest).
func UpToDate(ctx context.Context, cli *client.Client, s Spec) (bool, error) {
	img, err := cli.ImageInspect(ctx, s.Tag)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect image %s: %w", s.Tag, err)
	}
	digest, err := SourceDigest(ctx, s)
	if err != nil {
		return false, err
	}
	return img.Config != nil && img.Config.Labels[LabelSourceDigest] == digest, nil
}

// SourceDigest is a digest of what the image of s is made of: the Go
// toolchain's version, the image's recipe (Dockerfile) and every file of
// every non-standard package the program is built from (go list -deps),
// by path relative to its module and content.
func SourceDigest(ctx context.Context, s Spec) (string, error) {
	list := exec.CommandContext(ctx, "go", "list", "-deps", "-f",
		"{{if not .Standard}}{{.ImportPath}}\t{{.Dir}}{{range .GoFiles}}\t{{.}}{{end}}{{range .EmbedFiles}}\t{{.}}{{end}}{{end}}", s.Package)
	list.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	var stderr bytes.Buffer
	list.Stderr = &stderr
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("source digest of %s: go list: %w: %s", s.Package, err, strings.TrimSpace(stderr.String()))
	}
	ver, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("source digest of %s: go env: %w", s.Package, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %s\n%s\n", strings.TrimSpace(string(ver)), dockerfile(s.User))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 2 {
			continue
		}
		fmt.Fprintf(h, "package %s\n", f[0])
		for _, name := range f[2:] {
			b, err := os.ReadFile(filepath.Join(f[1], name))
			if err != nil {
				return "", fmt.Errorf("source digest of %s: %w", s.Package, err)
			}
			fmt.Fprintf(h, "file %s %d\n", name, len(b))
			h.Write(b)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// dockerfile is the image's recipe.
func dockerfile(user string) string {
	d := fmt.Sprintf("FROM scratch\nCOPY %s /%s\n", binaryName, binaryName)
	if user != "" {
		d += "USER " + user + "\n"
	}
	return d + fmt.Sprintf("ENTRYPOINT [\"/%s\"]\n", binaryName)
}

// BuildSpec compiles s.Package and builds the image s.Tag from it: FROM
// scratch, the binary at /prog, ENTRYPOINT ["/prog"], USER s.User, labelled
// with the package and its SourceDigest. It never pulls. When a rebuild
// moves the tag, the image it left behind is removed (unless a container
// still uses it).
func BuildSpec(ctx context.Context, cli *client.Client, s Spec) error {
	tag, goPackage := s.Tag, s.Package
	digest, err := SourceDigest(ctx, s)
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	dir, err := os.MkdirTemp("", "testimage-")
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer os.RemoveAll(dir)

	ver, err := cli.ServerVersion(ctx)
	if err != nil {
		return fmt.Errorf("build image %s: ask the engine its platform: %w", tag, err)
	}
	if ver.Os != "" && ver.Os != "linux" {
		return fmt.Errorf("build image %s: engine runs %s containers, not linux", tag, ver.Os)
	}
	bin := filepath.Join(dir, binaryName)
	// No -trimpath: it keys the compile cache apart from every other build
	// of the same packages, so an image of the Manager would compile its
	// whole dependency tree (the cloud SDKs among it) a second time.
	gobuild := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", bin, goPackage)
	gobuild.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if ver.Arch != "" {
		gobuild.Env = append(gobuild.Env, "GOARCH="+ver.Arch)
	}
	if out, err := gobuild.CombinedOutput(); err != nil {
		return fmt.Errorf("build image %s: go build %s: %w\n%s", tag, goPackage, err, out)
	}

	buildCtx, err := contextTar(bin, s.User)
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}

	var oldID string
	if old, err := cli.ImageInspect(ctx, tag); err == nil {
		oldID = old.ID
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("build image %s: inspect: %w", tag, err)
	}

	resp, err := cli.ImageBuild(ctx, buildCtx, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		PullParent:  false, // FROM scratch needs nothing; never pull
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{LabelPackage: goPackage, LabelSourceDigest: digest},
	})
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := readBuildOutput(resp.Body); err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}

	if oldID != "" {
		if now, err := cli.ImageInspect(ctx, tag); err == nil && now.ID != oldID {
			// Best effort: a container may still use the old image.
			_, _ = cli.ImageRemove(ctx, oldID, image.RemoveOptions{})
		}
	}
	return nil
}

// contextTar makes the build context: the Dockerfile and the binary.
func contextTar(bin, user string) (io.Reader, error) {
	prog, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte(dockerfile(user))},
		{binaryName, 0o755, prog},
	}
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	return &buf, nil
}

// readBuildOutput drains the engine's JSON message stream and returns the
// first error it reports.
func readBuildOutput(r io.Reader) error {
	dec := json.NewDecoder(r)
	var tail []string
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read build output: %w", err)
		}
		if s := strings.TrimSpace(msg.Stream); s != "" {
			tail = append(tail, s)
			if len(tail) > 10 {
				tail = tail[1:]
			}
		}
		if msg.Error != "" || msg.ErrorDetail.Message != "" {
			m := msg.ErrorDetail.Message
			if m == "" {
				m = msg.Error
			}
			return fmt.Errorf("engine: %s (after: %s)", m, strings.Join(tail, " | "))
		}
	}
}
