package intercept

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// strictJSON is the Connect JSON codec the API serves. connect-go's own
// decodes with protojson's DiscardUnknown, which drops unknown fields and
// — with them — enum names it does not know, so a typo such as
// "sameNode": "FORBID" became the enum's zero value and was stored. This
// one refuses both, naming the field by its JSON path: the caller's request
// fails with INVALID_ARGUMENT and changes nothing. Encoding is protojson's,
// as before. (Binary protobuf keeps unknown fields for compatibility with
// newer clients; unknown enum numbers are refused by the field bounds.)
type strictJSON struct{ name string }

// StrictJSONCodecs replace both names connect registers JSON under.
func StrictJSONCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(strictJSON{"json"}),
		connect.WithCodec(strictJSON{"json; charset=utf-8"}),
	}
}

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(m any) ([]byte, error) {
	if e, ok := m.(Encoded); ok {
		m = e.Message()
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (c strictJSON) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	return decodeStrictJSON(data, pm)
}

// maxJSONErr bounds the decoder's own message when the diagnosis finds
// nothing more precise (it may quote the input).
const maxJSONErr = 256

// decodeStrictJSON decodes data into m, refusing unknown fields and enum
// names. On a refusal it finds the offending field's path for the error.
func decodeStrictJSON(data []byte, m proto.Message) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return apierr.Invalid("", "an empty body is not a JSON object")
	}
	err := protojson.UnmarshalOptions{}.Unmarshal(data, m)
	if err == nil {
		return nil
	}
	proto.Reset(m)
	if derr := diagnoseJSON(data, m.ProtoReflect().Descriptor()); derr != nil {
		return derr
	}
	msg := err.Error()
	if len(msg) > maxJSONErr {
		msg = strings.ToValidUTF8(msg[:maxJSONErr], "") + "…"
	}
	return apierr.Invalid("", "%s", msg)
}

// errJSONShape stops the diagnosis at input protojson itself explains
// better (malformed JSON, a value of the wrong type).
var errJSONShape = errors.New("not diagnosed")

// diagnoseJSON walks data against md and returns an apierr naming the
// first unknown field or unknown enum name, or nil when it finds neither.
func diagnoseJSON(data []byte, md protoreflect.MessageDescriptor) error {
	d := &jsonDiag{dec: json.NewDecoder(bytes.NewReader(data))}
	d.dec.UseNumber()
	err := d.message(md, "")
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

type jsonDiag struct{ dec *json.Decoder }

func (d *jsonDiag) token() (json.Token, error) {
	t, err := d.dec.Token()
	if err != nil {
		return nil, errJSONShape
	}
	return t, nil
}

// skip consumes one value, however nested, without recursing.
func (d *jsonDiag) skip() error {
	depth := 0
	for {
		t, err := d.token()
		if err != nil {
			return err
		}
		if delim, ok := t.(json.Delim); ok {
			switch delim {
			case '{', '[':
				depth++
			default:
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// wellKnown are messages with a JSON form of their own (protojson checks
// them).
func wellKnown(md protoreflect.MessageDescriptor) bool {
	return strings.HasPrefix(string(md.FullName()), "google.protobuf.")
}

func (d *jsonDiag) message(md protoreflect.MessageDescriptor, path string) error {
	t, err := d.token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil // null: the default
	}
	if t != json.Delim('{') {
		return errJSONShape
	}
	fields := md.Fields()
	for d.dec.More() {
		kt, err := d.token()
		if err != nil {
			return err
		}
		key, _ := kt.(string)
		f := fields.ByJSONName(key)
		if f == nil {
			f = fields.ByTextName(key)
		}
		if f == nil {
			// (The API's messages have no extensions: "[name]" is
			// unknown too.)
			return apierr.Invalid(unknownFieldPath(path, key), "unknown field: %s has no field %s", md.Name(), apierr.Quote(key))
		}
		p := jsonPathJoin(path, f.JSONName())
		switch {
		case f.IsMap():
			err = d.mapValue(f, p)
		case f.IsList():
			err = d.list(f, p)
		default:
			err = d.value(f, p)
		}
		if err != nil {
			return err
		}
	}
	_, err = d.token() // '}'
	return err
}

func (d *jsonDiag) list(f protoreflect.FieldDescriptor, path string) error {
	t, err := d.token()
	if err != nil || t == nil {
		return err
	}
	if t != json.Delim('[') {
		return errJSONShape
	}
	for i := 0; d.dec.More(); i++ {
		if err := d.value(f, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err = d.token() // ']'
	return err
}

func (d *jsonDiag) mapValue(f protoreflect.FieldDescriptor, path string) error {
	t, err := d.token()
	if err != nil || t == nil {
		return err
	}
	if t != json.Delim('{') {
		return errJSONShape
	}
	for d.dec.More() {
		kt, err := d.token()
		if err != nil {
			return err
		}
		k, _ := kt.(string)
		if err := d.value(f.MapValue(), path+keyPathJSON(k)); err != nil {
			return err
		}
	}
	_, err = d.token() // '}'
	return err
}

// unknownFieldPath is the path of an unknown field: path.key for a plain
// name, else path["key"] (quoted, cut short).
func unknownFieldPath(path, key string) string {
	if kp := keyPathJSON(key); strings.HasPrefix(kp, ".") {
		return jsonPathJoin(path, key)
	}
	return path + keyPathJSON(key)
}

func keyPathJSON(k string) string {
	if k != "" && len(k) <= 64 && !strings.ContainsAny(k, ".[]\"") && strings.IndexFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0 {
		return "." + k
	}
	return "[" + apierr.Quote(k) + "]"
}

// value checks one value of field f (singular, a list element or a map
// value).
func (d *jsonDiag) value(f protoreflect.FieldDescriptor, path string) error {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if wellKnown(f.Message()) {
			return d.skip()
		}
		return d.message(f.Message(), path)
	case protoreflect.EnumKind:
		t, err := d.token()
		if err != nil {
			return err
		}
		name, ok := t.(string)
		if !ok || f.Enum().FullName() == "google.protobuf.NullValue" {
			if delim, isDelim := t.(json.Delim); isDelim && (delim == '{' || delim == '[') {
				return errJSONShape
			}
			return nil // a number or null: protojson and the bounds check it
		}
		if f.Enum().Values().ByName(protoreflect.Name(name)) == nil {
			return apierr.Invalid(path, "unknown value %s for %s (known: %s)", apierr.Quote(name), f.Enum().Name(), enumValueNames(f.Enum()))
		}
		return nil
	}
	return d.skip()
}

func enumValueNames(e protoreflect.EnumDescriptor) string {
	vals := e.Values()
	names := make([]string, 0, vals.Len())
	for i := 0; i < vals.Len(); i++ {
		names = append(names, string(vals.Get(i).Name()))
	}
	return strings.Join(names, ", ")
}

func jsonPathJoin(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
