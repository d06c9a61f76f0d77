package cmdutil

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/template"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// namePrinter writes NOUN/ID per object, one per line (-o name, as
// kubectl's): what a script feeds to the next command.
type namePrinter struct{ out io.Writer }

func (p *namePrinter) Print(r Result) error {
	var list []proto.Message
	switch d := r.Data.(type) {
	case proto.Message:
		list = []proto.Message{d}
	case []proto.Message:
		list = d
	default:
		return UsageErrorf("-o name: this command's result has no objects with names (use -o json)")
	}
	for _, m := range list {
		name, ok := objectName(m.ProtoReflect())
		if !ok {
			return UsageErrorf("-o name: a %s has no name (use -o json)", m.ProtoReflect().Descriptor().Name())
		}
		if _, err := fmt.Fprintln(p.out, name); err != nil {
			return err
		}
	}
	return nil
}

func (p *namePrinter) Event(ev *norsk.Event) error {
	_, err := fmt.Fprintf(p.out, "event/%d\n", ev.GetIndex())
	return err
}

// nameKinds maps an object's message name to its noun and the field that
// names it; a message that wraps one (JobWithHistory's job) is named by it.
var nameKinds = []struct{ prefix, noun, field string }{
	{"Migration", "migration", "migration_id"},
	{"Bundle", "bundle", "bundle_id"},
	{"ClusterSlot", "slot", "node_name"},
	{"Node", "node", "node_id"},
	{"Job", "job", "job_id"},
	{"Token", "token", "token_id"},
	{"Kv", "kv", "key"},
	{"Audit", "audit", "seq"},
}

func objectName(m protoreflect.Message) (string, bool) {
	desc := m.Descriptor()
	for _, k := range nameKinds {
		if !strings.HasPrefix(string(desc.Name()), k.prefix) {
			continue
		}
		if f := desc.Fields().ByName(protoreflect.Name(k.field)); f != nil && f.Kind() != protoreflect.MessageKind {
			if v := m.Get(f).String(); v != "" {
				return k.noun + "/" + v, true
			}
		}
	}
	// A wrapper (JobWithHistory, a view): named by its one named part.
	fields := desc.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() && m.Has(f) {
			if name, ok := objectName(m.Get(f).Message()); ok {
				return name, true
			}
		}
	}
	return "", false
}

// templatePrinter executes a Go template (-o go-template=…, as kubectl's)
// on the result's JSON form: once per result, with the list itself when the
// result is a list, and once per event of a stream.
type templatePrinter struct {
	out io.Writer
	tpl *template.Template
}

func newTemplatePrinter(text string, out io.Writer) (*templatePrinter, error) {
	tpl, err := template.New("output").Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, UsageErrorf("-o go-template: %v", err)
	}
	return &templatePrinter{out: out, tpl: tpl}, nil
}

func (p *templatePrinter) Print(r Result) error {
	js, err := toJSON(r.Data)
	if err != nil {
		return err
	}
	return p.exec(js)
}

func (p *templatePrinter) Event(ev *norsk.Event) error {
	js, err := protoJSON.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return p.exec(js)
}

func (p *templatePrinter) exec(js []byte) error {
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		return fmt.Errorf("decode JSON: %w", err)
	}
	if err := p.tpl.Execute(p.out, v); err != nil {
		return fmt.Errorf("-o go-template: %w", err)
	}
	return nil
}
