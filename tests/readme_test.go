package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
)

// Issue 19 §1: README.md's own command blocks, run as written, so the
// document cannot drift from the code. Every ```sh block carries a marker
// on the line above it: <!-- readme-test: run --> or <!-- readme-test:
// skip: the reason -->. Run blocks are run in document order, line by line,
// by bash, from the repository root, as a newcomer on a fresh clone would:
// a fresh HOME, the built binaries for `go run ./cmd/...`, against the
// `norsk-manager dev` the blocks start. What the harness changes is in
// readmeRewrites and readmePlaceholders; nothing else is.
func TestReadme(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, filepath.Join(root, "README.md"))
	if testing.Short() {
		t.Log("-short: the process runtime only")
	}

	bins := t.TempDir()
	manager := buildManager(t)
	for _, b := range []struct{ name, pkg string }{
		{"norsk-ctl", "./cmd/norsk-ctl"},
		{"sink", "./examples/sample-media/sink"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bins, b.name), b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	home := t.TempDir()
	s := &readmeScenario{
		t: t, root: root, manager: manager, bins: bins, home: home,
		addr: fmt.Sprintf("127.0.0.1:%d", testcluster.FreePort(t, "127.0.0.1")),
		env:  readmeEnv(home, bins),
	}
	if testing.Short() || !dockerAnswers() {
		s.runtime = "process"
	}
	defer s.cleanup()

	for _, b := range blocks {
		if b.skip != "" {
			t.Logf("README.md:%d: skipped: %s", b.line, b.skip)
			continue
		}
		for _, l := range b.lines {
			s.run(l)
			if t.Failed() {
				return
			}
		}
	}
}

// readmeBlock is a ```sh block of README.md.
type readmeBlock struct {
	line  int // of the ```sh
	skip  string
	lines []readmeLine
}

// readmeLine is one command of a block (continuation lines joined).
type readmeLine struct {
	n    int
	text string
}

var markerRE = regexp.MustCompile(`^<!-- readme-test: (run|skip: (.+)) -->$`)

// readmeBlocks reads the ```sh blocks of path; a block without a marker,
// or a skip without its reason, fails the test.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		blk := readmeBlock{line: i + 1}
		prev := ""
		if i > 0 {
			prev = strings.TrimSpace(lines[i-1])
		}
		m := markerRE.FindStringSubmatch(prev)
		if m == nil {
			t.Errorf("README.md:%d: a ```sh block without a marker above it (<!-- readme-test: run --> or <!-- readme-test: skip: the reason -->)", i+1)
		} else if m[1] != "run" {
			blk.skip = strings.TrimSpace(m[2])
		}
		var cur strings.Builder
		start := 0
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			l := lines[i]
			if cur.Len() == 0 {
				start = i + 1
			}
			if strings.HasSuffix(l, "\\") {
				cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
				continue
			}
			cur.WriteString(l)
			if txt := strings.TrimSpace(cur.String()); txt != "" && !strings.HasPrefix(txt, "#") {
				blk.lines = append(blk.lines, readmeLine{n: start, text: txt})
			}
			cur.Reset()
		}
		blocks = append(blocks, blk)
	}
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```sh block")
	}
	if t.Failed() {
		t.FailNow()
	}
	return blocks
}

// readmeRewrites are the only changes made to a line before bash runs it.
var readmeRewrites = []struct{ from, to, why string }{
	{"go run ./cmd/norsk-ctl ", "norsk-ctl ", "the norsk-ctl built once for the test, on PATH (as `norsk-ctl` is)"},
	{"127.0.0.1:6790", "{addr}", "dev listens on a free loopback port, not 6790"},
}

// readmePlaceholder fills a <placeholder> of a line, or says why the line
// is not run.
type readmePlaceholder struct {
	fill func(s *readmeScenario) string
	skip string
}

// readmePlaceholders are the lines with <placeholders>, and how they are
// filled.
var readmePlaceholders = map[string]readmePlaceholder{
	"<pid of the primary's worker>": {fill: func(s *readmeScenario) string {
		return s.primaryWorkerPID("resilient.channel.0")
	}},
}

// readmeScenario is the state of a run: the dev running, the environment
// the lines left behind.
type readmeScenario struct {
	t                         *testing.T
	root, manager, bins, home string
	addr                      string
	runtime                   string // "" as dev picks, or "process"
	env                       []string
	dev                       *exec.Cmd
	devExited                 chan struct{}
	devOut                    *syncLog
	devLog                    *syncLog
	banner                    string
	background                []*exec.Cmd
	// sinkOut is the sample-media sink's report: the frames of the job the
	// README runs must reach it, in either runtime.
	sinkOut           *syncLog
	persistentDataDir string
}

// readmeEnv is a newcomer's environment: a fresh HOME (so dev's data
// directory, its token and norsk-ctl's lookup are the README's
// ~/.local/share/...), the built binaries first on PATH, Go's caches kept.
func readmeEnv(home, bins string) []string {
	env := []string{"HOME=" + home, "PATH=" + bins + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "DOCKER_HOST", "TMPDIR", "LANG"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	if os.Getenv("GOCACHE") == "" {
		if out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output(); err == nil {
			f := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(f) == 3 {
				env = append(env, "GOCACHE="+f[0], "GOMODCACHE="+f[1], "GOPATH="+f[2])
			}
		}
	}
	return env
}

func dockerAnswers() bool {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = cli.Ping(ctx)
	return err == nil
}

// run runs one line of a run block.
func (s *readmeScenario) run(l readmeLine) {
	t := s.t
	t.Helper()
	cmdPart := l.text
	if i := strings.Index(cmdPart, " #"); i >= 0 {
		cmdPart = strings.TrimSpace(cmdPart[:i])
	}
	// (Re)start dev.
	if rest, ok := strings.CutPrefix(cmdPart, "go run ./cmd/norsk-manager dev"); ok {
		s.startDev(l, strings.Fields(rest))
		return
	}
	// A command that runs until Ctrl-C, in another terminal: in the
	// background until the test ends.
	if rest, ok := strings.CutPrefix(cmdPart, "go run ./examples/sample-media/sink"); ok {
		cmd := exec.Command(filepath.Join(s.bins, "sink"), strings.Fields(rest)...)
		cmd.Dir, cmd.Env = s.root, s.env
		s.sinkOut = &syncLog{}
		cmd.Stdout, cmd.Stderr = s.sinkOut, s.sinkOut
		if err := cmd.Start(); err != nil {
			t.Fatalf("README.md:%d: %s: %v", l.n, l.text, err)
		}
		s.background = append(s.background, cmd)
		t.Logf("README.md:%d: in the background: %s", l.n, cmdPart)
		return
	}
	if strings.HasPrefix(cmdPart, "docker ") && s.devRuntime() != "docker" {
		t.Logf("README.md:%d: skipped: the %s runtime runs no containers: %s", l.n, s.devRuntime(), cmdPart)
		return
	}
	line := cmdPart
	for _, m := range regexp.MustCompile(`<[^<>]+>`).FindAllString(line, -1) {
		p, ok := readmePlaceholders[m]
		if !ok {
			t.Fatalf("README.md:%d: placeholder %s is not in readmePlaceholders: %s", l.n, m, l.text)
		}
		if p.skip != "" {
			t.Logf("README.md:%d: skipped: %s", l.n, p.skip)
			return
		}
		line = strings.ReplaceAll(line, m, p.fill(s))
	}
	for _, r := range readmeRewrites {
		line = strings.ReplaceAll(line, r.from, strings.ReplaceAll(r.to, "{addr}", s.addr))
	}
	if s.devRuntime() == "process" {
		line = processVariants(s.root, line)
	}
	// Commands that follow a stream until Ctrl-C: interrupted after a while.
	follow := regexp.MustCompile(`^norsk-ctl (events)\b`).MatchString(line)
	s.bash(l, line, follow)
}

// processVariants names the process runtime's example files: X.yaml →
// X-process.yaml where that exists (the README's rule for the runtime).
func processVariants(root, line string) string {
	return regexp.MustCompile(`examples/(jobs|bundles)/([a-z0-9-]+)\.yaml`).ReplaceAllStringFunc(line, func(f string) string {
		alt := strings.TrimSuffix(f, ".yaml") + "-process.yaml"
		if _, err := os.Stat(filepath.Join(root, alt)); err == nil && !strings.HasSuffix(f, "-process.yaml") {
			return alt
		}
		return f
	})
}

// bash runs line with bash from the repository root, in the environment the
// lines before it left, and keeps the environment it leaves.
func (s *readmeScenario) bash(l readmeLine, line string, follow bool) {
	t := s.t
	t.Helper()
	envFile := filepath.Join(s.home, ".readme-env")
	script := "set -o pipefail\n" + line + "\n__rc=$?\nenv -0 > " + envFile + "\nexit $__rc\n"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = s.root, s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	interrupted := false
	if follow {
		timer := time.AfterFunc(3*time.Second, func() {
			interrupted = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		})
		defer timer.Stop()
	}
	err := cmd.Wait()
	t.Logf("README.md:%d: $ %s\n%s", l.n, line, indent(out.String()))
	if err != nil && !(follow && interrupted) {
		t.Fatalf("README.md:%d: %s: %v\n%s\n-- dev's log:\n%s", l.n, line, err, out.String(), tail(s.devLog.String(), 40))
	}
	if follow && !interrupted {
		t.Errorf("README.md:%d: %s ended by itself; it should follow until Ctrl-C", l.n, line)
	}
	if b, err := os.ReadFile(envFile); err == nil && !follow {
		var env []string
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv != "" && !strings.HasPrefix(kv, "_=") && !strings.HasPrefix(kv, "__rc=") && !strings.HasPrefix(kv, "SHLVL=") && !strings.HasPrefix(kv, "PWD=") && !strings.HasPrefix(kv, "OLDPWD=") {
				env = append(env, kv)
			}
		}
		s.env = env
	}
}

// startDev stops the dev running, if any (Ctrl-C), and starts one with the
// line's flags on the scenario's loopback port.
func (s *readmeScenario) startDev(l readmeLine, flags []string) {
	t := s.t
	t.Helper()
	s.stopDev()
	args := append([]string{"dev"}, flags...)
	args = append(args, "--listen", s.addr, "--console-listen", "127.0.0.1:0")
	if s.runtime != "" {
		args = append(args, "--runtime", s.runtime)
	}
	cmd := exec.Command(s.manager, args...)
	cmd.Dir, cmd.Env = s.root, s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.devOut, s.devLog = &syncLog{}, &syncLog{}
	cmd.Stderr = s.devLog
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.dev, s.devExited = cmd, make(chan struct{})
	up := make(chan struct{})
	go func(out *syncLog, exited chan struct{}) {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			out.Write([]byte(sc.Text() + "\n"))
			// The banner's last part: the console's password line.
			if !sent && strings.Contains(sc.Text(), "sign in as") {
				close(up)
				sent = true
			}
		}
		_ = cmd.Wait()
		close(exited)
	}(s.devOut, s.devExited)
	select {
	case <-up:
	case <-s.devExited:
		t.Fatalf("README.md:%d: dev exited before it was up:\n%s\n%s", l.n, s.devOut.String(), s.devLog.String())
	case <-time.After(4 * time.Minute):
		t.Fatalf("README.md:%d: dev was not up after 4 minutes:\n%s\n%s", l.n, s.devOut.String(), s.devLog.String())
	}
	time.Sleep(200 * time.Millisecond) // the rest of the banner
	s.banner = s.devOut.String()
	t.Logf("README.md:%d: $ norsk-manager %s\n%s", l.n, strings.Join(args, " "), indent(s.banner))
	if !strings.Contains(s.banner, "http://"+s.addr) {
		t.Fatalf("dev's banner does not name %s:\n%s", s.addr, s.banner)
	}
	if m := regexp.MustCompile(`(?m)^\s+data\s+(\S+)\s+\(kept`).FindStringSubmatch(s.banner); m != nil {
		s.persistentDataDir = m[1]
	}
}

// devRuntime is the runtime the running dev chose (its banner says).
func (s *readmeScenario) devRuntime() string {
	if m := regexp.MustCompile(`\(runtime: (\w+)\)`).FindStringSubmatch(s.banner); m != nil {
		return m[1]
	}
	return s.runtime
}

// stopDev stops the running dev as Ctrl-C in its terminal would.
func (s *readmeScenario) stopDev() {
	if s.dev == nil {
		return
	}
	_ = syscall.Kill(-s.dev.Process.Pid, syscall.SIGINT)
	select {
	case <-s.devExited:
	case <-time.After(2 * time.Minute):
		s.t.Errorf("dev did not stop within 2 minutes of Ctrl-C:\n%s", tail(s.devLog.String(), 40))
		_ = syscall.Kill(-s.dev.Process.Pid, syscall.SIGKILL)
		<-s.devExited
	}
	s.dev = nil
}

// primaryWorkerPID is the pid (from dev's banner) of the worker whose node
// runs job's primary.
func (s *readmeScenario) primaryWorkerPID(job string) string {
	t := s.t
	var node string
	deadline := time.Now().Add(2 * time.Minute)
	for node == "" {
		cmd := exec.Command(filepath.Join(s.bins, "norsk-ctl"), "--manager-url", "http://"+s.addr, "job", "get", job, "-o", "json")
		cmd.Env = s.env
		out, err := cmd.Output()
		if err == nil {
			if m := regexp.MustCompile(`"role":\s*"primary"[^}]*?"nodeId":\s*"([^"]+)"|"nodeId":\s*"([^"]+)"[^}]*?"role":\s*"primary"`).FindStringSubmatch(string(out)); m != nil {
				node = m[1] + m[2]
			}
		}
		if node == "" && time.Now().After(deadline) {
			t.Fatalf("no node runs %s's primary: %v\n%s", job, err, out)
		}
		if node == "" {
			time.Sleep(250 * time.Millisecond)
		}
	}
	m := regexp.MustCompile(`(dev-worker-\d+)\s+node ` + regexp.QuoteMeta(node)).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("node %s is not in dev's banner:\n%s", node, s.banner)
	}
	p := regexp.MustCompile(regexp.QuoteMeta(m[1]) + ` pid (\d+)`).FindStringSubmatch(s.banner)
	if p == nil {
		t.Fatalf("dev's banner names no pid for %s:\n%s", m[1], s.banner)
	}
	return p[1]
}

// cleanup stops dev and what it leaves running on purpose (the instances a
// persistent dev leaves to be adopted), and the background commands.
func (s *readmeScenario) cleanup() {
	for _, c := range s.background {
		_ = c.Process.Signal(syscall.SIGINT)
		_ = c.Wait()
	}
	if s.sinkOut != nil {
		// The frames reached the one sink command (a container's through
		// host.docker.internal, a process's on loopback).
		m := regexp.MustCompile(`final: frames=(\d+)`).FindStringSubmatch(s.sinkOut.String())
		if m == nil || m[1] == "0" {
			s.t.Errorf("the sink received no frame from the sample media job:\n%s", s.sinkOut.String())
		} else {
			s.t.Logf("the sink: %s", strings.TrimSpace(s.sinkOut.String()[strings.LastIndex(s.sinkOut.String(), "final:"):]))
		}
	}
	s.stopDev()
	if s.persistentDataDir == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(s.persistentDataDir, "workers", "*"))
	for _, pid := range instancePIDs(s.t, s.persistentDataDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if dockerAnswers() {
		if cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err == nil {
			cleanupDev(s.t, cli, dirs)
			_ = cli.Close()
		}
	}
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
