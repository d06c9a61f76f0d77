package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/norsk-go/norsk-manager/examples/exampletest"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestListenAddr(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{nil, ":8080"},
		{map[string]string{"PORT": "9000"}, ":9000"},
		{map[string]string{"PORT": "0"}, ":0"},
		{map[string]string{"NORSK_PORT_8080": "31000"}, ":31000"},
		{map[string]string{"NORSK_PORT_8080": "31000", "PORT": "9000"}, ":31000"},
		{map[string]string{"NORSK_PORT_8080": " ", "PORT": "9000"}, ":9000"},
		{map[string]string{"PORT": "127.0.0.1:9000"}, "127.0.0.1:9000"},
	}
	for _, tt := range tests {
		if got := listenAddr(envMap(tt.env)); got != tt.want {
			t.Errorf("listenAddr(%v) = %q, want %q", tt.env, got, tt.want)
		}
	}
}

func TestHandler(t *testing.T) {
	var served atomic.Uint64
	h := handler(identity{JobID: "j1", Role: "primary", RuntimeRole: "backup", NodeID: "n1"}, &served)
	tests := []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/", 200, "hello from job j1 role primary (runtime role backup) on node n1\n"},
		{"GET", "/healthz", 200, "ok\n"},
		{"HEAD", "/healthz", 200, ""},
		{"GET", "/other", 404, ""},
		{"POST", "/", 405, ""},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.code {
			t.Errorf("%s %s: code %d, want %d", tt.method, tt.path, rec.Code, tt.code)
		}
		if tt.body != "" && rec.Body.String() != tt.body {
			t.Errorf("%s %s: body %q, want %q", tt.method, tt.path, rec.Body.String(), tt.body)
		}
	}
	if served.Load() != 3 {
		t.Errorf("served = %d, want 3", served.Load())
	}
	rec := httptest.NewRecorder()
	handler(identity{}, &served).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if !strings.Contains(rec.Body.String(), "job (unset)") {
		t.Errorf("unset identity: body %q", rec.Body.String())
	}
}

// TestHelloBinary builds the program, runs it on a free port, queries it,
// SIGTERMs it and expects exit status 0.
func TestHelloBinary(t *testing.T) {
	bin := exampletest.Build(t, exampletest.HelloPackage)
	var log exampletest.Log
	cmd := exec.Command(bin)
	cmd.Env = exampletest.Env("PORT=0", "NORSK_JOB_ID=hello-test", "NORSK_ROLE=primary",
		"NORSK_RUNTIME_ROLE=primary", "NORSK_NODE_ID=node-7")
	cmd.Stdout, cmd.Stderr = &log, &log
	proc := exampletest.Start(t, cmd)

	m := log.WaitFor(t, regexp.MustCompile(`msg="hello started".* job=hello-test .*port=(\d+)`), 10*time.Second)
	base := fmt.Sprintf("http://127.0.0.1:%s", m[1])
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/"); code != 200 || body != "hello from job hello-test role primary (runtime role primary) on node node-7\n" {
		t.Errorf("GET /: %d %q", code, body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("GET /healthz: %d %q", code, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(t, 15*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v; log:\n%s", err, log.String())
	}
	if log.Find(regexp.MustCompile(`msg="hello stopped".* requests=2`)) == nil {
		t.Errorf("no stop line with requests=2; log:\n%s", log.String())
	}
}
