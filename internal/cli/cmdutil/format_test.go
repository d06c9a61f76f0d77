package cmdutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// now is the fixed clock of the tests.
var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestAgo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "just now"},
		{42 * time.Second, "42s ago"},
		{3*time.Minute + 10*time.Second, "3m ago"},
		{5 * time.Hour, "5h ago"},
		{47 * time.Hour, "47h ago"},
		{72 * time.Hour, "3d ago"},
		{-3 * time.Minute, "in 3m"},
	} {
		if got := Ago(now, timestamppb.New(now.Add(-tc.d))); got != tc.want {
			t.Errorf("ago(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	if got := Ago(now, nil); got != "-" {
		t.Errorf("ago(nil) = %q", got)
	}
}

func TestPorts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    *norsk.PortMapping
		want string
	}{
		{&norsk.PortMapping{ContainerPort: 80}, "80→*/tcp"},
		{&norsk.PortMapping{ContainerPort: 80, Protocol: norsk.ProtocolUDP, HostPort: &norsk.PortMapping_Specific{Specific: 8080}}, "80→8080/udp"},
		{&norsk.PortMapping{ContainerPort: 80, HostPort: &norsk.PortMapping_Range{Range: &norsk.PortRange{MinPort: 6000, MaxPort: 6100}}}, "80→6000-6100/tcp"},
		{&norsk.PortMapping{ContainerPort: 80, HostAddress: "127.0.0.1", HostPort: &norsk.PortMapping_Specific{Specific: 1}}, "80→127.0.0.1:1/tcp"},
	} {
		if got := SpecPort(tc.p); got != tc.want {
			t.Errorf("specPort(%v) = %q, want %q", tc.p, got, tc.want)
		}
	}
	got := ResolvedPorts(map[string]*norsk.ResolvedPortMappings{
		"web":  {Mappings: []*norsk.ResolvedPortMapping{{Target: 8080, Published: 32768, Protocol: norsk.ProtocolTCP}}},
		"rtmp": {Mappings: []*norsk.ResolvedPortMapping{{Target: 1935, Published: 32769, Protocol: norsk.ProtocolAny}}},
	})
	if want := "rtmp 1935→32769/tcp, web 8080→32768/tcp"; got != want {
		t.Errorf("resolvedPorts = %q, want %q", got, want)
	}
}

func TestEnumWordsAndSizes(t *testing.T) {
	t.Parallel()
	for e, want := range map[protoreflect.Enum]string{
		norsk.RestartModeOnFailure:        "on-failure",
		norsk.NodeStateOnline:             "online",
		norsk.StoppingReasonUserRequested: "user-requested",
		norsk.ArchitectureAarch64:         "aarch-64",
		norsk.JobStateActive:              "active",
	} {
		if got := EnumWord(e); got != want {
			t.Errorf("enumWord(%v) = %q, want %q", e, got, want)
		}
	}
	for n, want := range map[uint64]string{0: "-", 512: "512 B", 1536: "1.5 KiB", 64 << 30: "64.0 GiB"} {
		if got := BytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
	for in, want := range map[string]time.Duration{"90m": 90 * time.Minute, "2d": 48 * time.Hour, "1d12h": 36 * time.Hour, "0": 0} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "-1h", "xd", "1d-1h"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q) succeeded", bad)
		}
	}
}

// TestPrinters prints one result and one event in every format.
func TestPrinters(t *testing.T) {
	t.Parallel()
	node := &norsk.Node{NodeId: "n1", State: norsk.NodeStateOnline}
	list := []proto.Message{node, &norsk.Node{NodeId: "n2"}}
	ev := &norsk.Event{Index: 7, Timestamp: timestamppb.New(now), Kind: &norsk.Event_NodeOnline{NodeOnline: &norsk.NodeEvent{Node: node, Reason: "registered"}}}
	table := func(w io.Writer) { fmt.Fprintln(w, "ID\tSTATE"); fmt.Fprintln(w, "n1\tonline") }
	for _, tc := range []struct {
		format            string
		one, many, events string
	}{
		{"table", "ID  STATE\nn1  online\n", "ID  STATE\nn1  online\n", "7        2025-03-01T12:00:00.000Z  node_online                node n1 online: registered\n"},
		{"json", "{\n  \"nodeId\": \"n1\",\n  \"state\": \"NODE_STATE_ONLINE\"\n}\n", "[\n  {\n    \"nodeId\": \"n1\",\n    \"state\": \"NODE_STATE_ONLINE\"\n  },\n  {\n    \"nodeId\": \"n2\"\n  }\n]\n",
			`{"index":"7","timestamp":"2025-03-01T12:00:00Z","nodeOnline":{"node":{"nodeId":"n1","state":"NODE_STATE_ONLINE"},"reason":"registered"}}` + "\n"},
		{"yaml", "nodeId: n1\nstate: NODE_STATE_ONLINE\n", "- nodeId: n1\n  state: NODE_STATE_ONLINE\n- nodeId: n2\n", "---\nindex: \"7\"\nnodeOnline:\n  node:\n    nodeId: n1\n    state: NODE_STATE_ONLINE\n  reason: registered\ntimestamp: \"2025-03-01T12:00:00Z\"\n"},
	} {
		var one, many, events bytes.Buffer
		if err := newPrinter(tc.format, &one).Print(Result{Data: node, Table: table}); err != nil {
			t.Fatal(err)
		}
		if err := newPrinter(tc.format, &many).Print(Result{Data: list, Table: table}); err != nil {
			t.Fatal(err)
		}
		if err := newPrinter(tc.format, &events).Event(ev); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ name, got, want string }{{"one", one.String(), tc.one}, {"many", many.String(), tc.many}, {"event", events.String(), tc.events}} {
			if c.got != c.want {
				t.Errorf("%s %s:\ngot  %q\nwant %q", tc.format, c.name, c.got, c.want)
			}
		}
	}
	// Plain values are JSON too.
	var out bytes.Buffer
	if err := newPrinter("json", &out).Print(Result{Data: done{Kind: "job", ID: "j", Result: "deleted"}}); err != nil {
		t.Fatal(err)
	}
	var d done
	if err := json.Unmarshal(out.Bytes(), &d); err != nil || d.Result != "deleted" || !strings.HasSuffix(out.String(), "}\n") {
		t.Errorf("plain JSON = %q", out.String())
	}
}
