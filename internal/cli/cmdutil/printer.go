package cmdutil

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// printer writes command results in one output format. One implementation
// per format: tablePrinter (for people; -o wide its wider form), jsonPrinter (the API messages as
// protobuf JSON: one JSON document per result, a list as a JSON array) and
// yamlPrinter (the same JSON as YAML).
type printer interface {
	// Print writes one result.
	Print(r Result) error
	// Event writes one event of a stream on its own line (json: one compact
	// object per line; yaml: one document each).
	Event(ev *norsk.Event) error
}

// Result is what a command prints: data for the machine formats, table for
// people.
type Result struct {
	// Data is a proto.Message, a []proto.Message (printed as a JSON array)
	// or a plain Go value encoded with encoding/json.
	Data any
	// Table writes the human form to a tabwriter; the printer flushes it.
	Table func(w io.Writer)
	// Wide, when set, is the table with more columns, for -o wide (as
	// kubectl's); without it -o wide prints table.
	Wide func(w io.Writer)
}

func newPrinter(format string, out io.Writer) printer {
	switch format {
	case "json":
		return &jsonPrinter{out: out}
	case "yaml":
		return &yamlPrinter{out: out}
	case "name":
		return &namePrinter{out: out}
	case "wide":
		return &TablePrinter{out: out, wide: true}
	}
	return &TablePrinter{out: out}
}

// Messages converts a typed slice of messages to the []proto.Message of
// result.data.
func Messages[T proto.Message](xs []T) []proto.Message {
	out := make([]proto.Message, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// TablePrinter writes aligned columns with text/tabwriter; wide (-o wide)
// prints a result's wide form where it has one.
type TablePrinter struct {
	out  io.Writer
	wide bool
}

func (p *TablePrinter) Print(r Result) error {
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	if p.wide && r.Wide != nil {
		r.Wide(tw)
	} else {
		r.Table(tw)
	}
	return tw.Flush()
}

func (p *TablePrinter) Event(ev *norsk.Event) error {
	_, err := fmt.Fprintf(p.out, "%-8d %s  %-26s %s\n", ev.GetIndex(), eventTime(ev), eventKind(ev), EventSubject(ev))
	return err
}

func eventTime(ev *norsk.Event) string {
	if ev.GetTimestamp() == nil {
		return strings.Repeat(" ", len("2006-01-02T15:04:05.000Z"))
	}
	return ev.GetTimestamp().AsTime().UTC().Format("2006-01-02T15:04:05.000Z")
}

// jsonPrinter writes protobuf JSON.
type jsonPrinter struct{ out io.Writer }

var protoJSON = protojson.MarshalOptions{}

func (p *jsonPrinter) Print(r Result) error {
	js, err := toJSON(r.Data)
	if err != nil {
		return err
	}
	var buf strings.Builder
	if err := indentJSON(&buf, js); err != nil {
		return err
	}
	_, err = fmt.Fprintln(p.out, buf.String())
	return err
}

func (p *jsonPrinter) Event(ev *norsk.Event) error {
	js, err := protoJSON.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	var buf strings.Builder
	if err := compactJSON(&buf, js); err != nil {
		return err
	}
	_, err = fmt.Fprintln(p.out, buf.String())
	return err
}

// yamlPrinter writes the JSON form as YAML.
type yamlPrinter struct{ out io.Writer }

func (p *yamlPrinter) Print(r Result) error {
	js, err := toJSON(r.Data)
	if err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return fmt.Errorf("encode YAML: %w", err)
	}
	_, err = p.out.Write(y)
	return err
}

func (p *yamlPrinter) Event(ev *norsk.Event) error {
	js, err := protoJSON.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return fmt.Errorf("encode YAML: %w", err)
	}
	_, err = fmt.Fprintf(p.out, "---\n%s", y)
	return err
}

// toJSON encodes a result's data: messages with protojson, lists of them as
// a JSON array, anything else with encoding/json.
func toJSON(data any) ([]byte, error) {
	switch d := data.(type) {
	case proto.Message:
		js, err := protoJSON.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", d.ProtoReflect().Descriptor().Name(), err)
		}
		return js, nil
	case []proto.Message:
		list := make([]json.RawMessage, len(d))
		for i, m := range d {
			js, err := toJSON(m)
			if err != nil {
				return nil, err
			}
			list[i] = js
		}
		return json.Marshal(list)
	}
	js, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("encode JSON: %w", err)
	}
	return js, nil
}

func indentJSON(w *strings.Builder, js []byte) error {
	var v json.RawMessage = js
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	w.Write(out)
	return nil
}

func compactJSON(w *strings.Builder, js []byte) error {
	var v json.RawMessage = js
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	w.Write(out)
	return nil
}

// ProtoObject is a message's protojson, for embedding in a plain result.
func ProtoObject(m proto.Message) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	js, err := protoJSON.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return js
}
