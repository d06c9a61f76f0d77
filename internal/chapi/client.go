package chapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Root is the API's path prefix.
const Root = "/api/v1"

// Client calls one VMM's API over its Unix API socket. It is safe for
// concurrent use; every call is bounded by its context.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client of the VMM listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	return &Client{socket: socket, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Socket is the API socket the client calls.
func (c *Client) Socket() string { return c.socket }

// Error is an answer other than the one the call expects: its status and
// the VMM's error chain (the body, a JSON array of messages).
type Error struct {
	Endpoint string
	Status   int
	Messages []string
}

func (e *Error) Error() string {
	msg := strings.Join(e.Messages, ": ")
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("cloud-hypervisor %s: %d %s", e.Endpoint, e.Status, msg)
}

// IsNotFound reports whether err is the VMM's 404 (no VM created, or an
// unknown endpoint).
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// ErrUnreachable: nothing answers on the API socket (the VMM is not
// running).
var ErrUnreachable = errors.New("the VMM does not answer on its API socket")

func (c *Client) do(ctx context.Context, method, endpoint string, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("cloud-hypervisor %s: %w", endpoint, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+Root+"/"+endpoint, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("cloud-hypervisor %s on %s: %w (%v)", endpoint, c.socket, ErrUnreachable, err)
		}
		return fmt.Errorf("cloud-hypervisor %s on %s: %w", endpoint, c.socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("cloud-hypervisor %s: read the answer: %w", endpoint, err)
	}
	if resp.StatusCode != want {
		e := &Error{Endpoint: endpoint, Status: resp.StatusCode}
		if len(bytes.TrimSpace(b)) > 0 && json.Unmarshal(b, &e.Messages) != nil {
			e.Messages = []string{strings.TrimSpace(string(b))}
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("cloud-hypervisor %s: decode the answer: %w", endpoint, err)
		}
	}
	return nil
}

// Ping is GET /vmm.ping.
func (c *Client) Ping(ctx context.Context) (VmmPingResponse, error) {
	var out VmmPingResponse
	err := c.do(ctx, http.MethodGet, "vmm.ping", nil, &out, http.StatusOK)
	return out, err
}

// CreateVM is PUT /vm.create: the VM is created, not booted.
func (c *Client) CreateVM(ctx context.Context, cfg VmConfig) error {
	return c.do(ctx, http.MethodPut, "vm.create", cfg, nil, http.StatusNoContent)
}

// BootVM is PUT /vm.boot.
func (c *Client) BootVM(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "vm.boot", nil, nil, http.StatusNoContent)
}

// Info is GET /vm.info (a 404 Error when no VM is created).
func (c *Client) Info(ctx context.Context) (VmInfo, error) {
	var out VmInfo
	err := c.do(ctx, http.MethodGet, "vm.info", nil, &out, http.StatusOK)
	return out, err
}

// ShutdownVM is PUT /vm.shutdown.
func (c *Client) ShutdownVM(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "vm.shutdown", nil, nil, http.StatusNoContent)
}

// DeleteVM is PUT /vm.delete.
func (c *Client) DeleteVM(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "vm.delete", nil, nil, http.StatusNoContent)
}

// ShutdownVMM is PUT /vmm.shutdown: the VMM process exits.
func (c *Client) ShutdownVMM(ctx context.Context) error {
	err := c.do(ctx, http.MethodPut, "vmm.shutdown", nil, nil, http.StatusNoContent)
	if err != nil && errors.Is(err, io.EOF) {
		return nil // it exited before answering in full
	}
	return err
}
