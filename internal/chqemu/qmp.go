package chqemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// qmpCall connects to QEMU's QMP socket, negotiates capabilities and runs
// one command, returning its "return" value. Asynchronous events on the
// way are skipped.
func qmpCall(ctx context.Context, socket, command string, out any) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	r := bufio.NewReader(conn)
	dec := json.NewDecoder(r)
	var greeting map[string]json.RawMessage
	if err := dec.Decode(&greeting); err != nil {
		return fmt.Errorf("qmp greeting: %w", err)
	}
	if _, ok := greeting["QMP"]; !ok {
		return fmt.Errorf("qmp: %s does not greet as QMP", socket)
	}
	for _, cmd := range []string{"qmp_capabilities", command} {
		if _, err := fmt.Fprintf(conn, `{"execute":%q}`+"\n", cmd); err != nil {
			return fmt.Errorf("qmp %s: %w", cmd, err)
		}
		for {
			var resp struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Class string `json:"class"`
					Desc  string `json:"desc"`
				} `json:"error"`
				Event string `json:"event"`
			}
			if err := dec.Decode(&resp); err != nil {
				return fmt.Errorf("qmp %s: %w", cmd, err)
			}
			if resp.Event != "" {
				continue
			}
			if resp.Error != nil {
				return fmt.Errorf("qmp %s: %s: %s", cmd, resp.Error.Class, resp.Error.Desc)
			}
			if cmd == command && out != nil && len(resp.Return) > 0 {
				if err := json.Unmarshal(resp.Return, out); err != nil {
					return fmt.Errorf("qmp %s: %w", cmd, err)
				}
			}
			break
		}
	}
	return nil
}

// qmpStatus is query-status's answer.
type qmpStatus struct {
	Running bool   `json:"running"`
	Status  string `json:"status"`
}
