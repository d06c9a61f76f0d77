package norsk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	yamlv2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"sigs.k8s.io/yaml"
)

// DecodeJobSpec reads one job specification written in YAML or JSON, with
// the protobuf JSON field names of Job (lowerCamelCase, e.g. jobId,
// containerPort) or the proto names (job_id, container_port).
//
// Enum values may be written as the full proto name (RESTART_MODE_ON_FAILURE,
// PROTOCOL_UDP), as the number, or in a short form: any spelling whose
// letters and digits, ignoring case and the separators "-", "_", "." and " ",
// are those of the tail of exactly one value name after an underscore (on-failure,
// onFailure, ON_FAILURE, udp). String fields accept integers (env: {PORT:
// 8080}); other mismatched types are refused, since YAML would otherwise
// change them silently (a tag value 1.10 would read as "1.1").
//
// Unknown fields, unknown or ambiguous enum values, duplicate fields and two
// members of one oneof are errors that name the field's path, e.g.
//
//	services[0].restart.mode: unknown value "sometimes" (want one of never, on-failure, always)
//
// What norsk-ctl job get -o yaml|json prints (a JobWithHistory) decodes
// as its job, so get's output is update's input; its instances and history
// are dropped.
//
// DecodeJobSpec checks the form of the specification only; the Manager
// validates its content when the job is created.
func DecodeJobSpec(data []byte) (*Job, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return decodeJSONSpec(trimmed)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	return decodeJSONSpec(js)
}

// DecodeJobSpecs reads every job specification of data: a YAML stream of
// documents separated by "---" (empty documents are skipped), a JSON array of
// specifications, or a single one. Errors name the document (counted from 1)
// or array element they are in.
func DecodeJobSpecs(data []byte) ([]*Job, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(trimmed, &raws); err != nil {
			return nil, fmt.Errorf("job specs: %w", err)
		}
		jobs := make([]*Job, 0, len(raws))
		for i, raw := range raws {
			job, err := decodeJSONSpec(raw)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			jobs = append(jobs, job)
		}
		return jobs, nil
	}
	if len(trimmed) > 0 && trimmed[0] == '{' {
		job, err := decodeJSONSpec(trimmed)
		if err != nil {
			return nil, err
		}
		return []*Job{job}, nil
	}
	var jobs []*Job
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	for n := 1; ; n++ {
		var doc yamlv2.MapSlice
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: job spec: %w", n, err)
		}
		if doc == nil {
			continue
		}
		// Re-encode the document and decode it as DecodeJobSpec does, so
		// that both apply the same rules (duplicate keys included).
		raw, err := yamlv2.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: job spec: %w", n, err)
		}
		job, err := DecodeJobSpec(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		jobs = append(jobs, job)
	}
	if len(jobs) == 0 {
		return nil, errors.New("job specs: no job in the input")
	}
	return jobs, nil
}

// decodeJSONSpec decodes one specification in JSON.
func decodeJSONSpec(data []byte) (*Job, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	if dec.More() {
		return nil, errors.New("job spec: more than one JSON value (use DecodeJobSpecs for several jobs)")
	}
	if tree == nil {
		return nil, errors.New("job spec: empty")
	}
	tree = unwrapJobWithHistory(tree)
	job := &Job{}
	tree, err := normalizeMessage(job.ProtoReflect().Descriptor(), tree, "")
	if err != nil {
		return nil, err
	}
	normalized, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	if err := protojson.Unmarshal(normalized, job); err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	return job, nil
}

// unwrapJobWithHistory takes the job out of what `norsk-ctl job get -o
// yaml|json` prints (a JobWithHistory: the job, with its instances and
// history beside it, which the Manager keeps and a spec cannot set), so that
// get's output is an update's input, as kubectl apply takes kubectl get's
// (status and all). A plain job spec is returned as it is.
func unwrapJobWithHistory(tree any) any {
	m, ok := tree.(map[string]any)
	if !ok {
		return tree
	}
	inner, ok := m["job"].(map[string]any)
	if !ok {
		return tree
	}
	for k := range m {
		switch k {
		case "job", "history", "instances":
		default:
			return tree // not the JobWithHistory form: let the decoder name the field
		}
	}
	return inner
}

// specError is a decoding error at a field path.
func specError(path, format string, args ...any) error {
	if path == "" {
		path = "job spec"
	}
	return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
}

func fieldPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// normalizeMessage walks v, the JSON form of a message md, checking its
// fields and rewriting enum values to their proto names.
func normalizeMessage(md protoreflect.MessageDescriptor, v any, path string) (any, error) {
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		// Well-known types have their own JSON forms: check the value with
		// protojson here, so that the error names the path.
		return v, checkWellKnown(md, v, path)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, specError(path, "want an object, got %s", jsonType(v))
	}
	keys := sortedKeys(obj)
	fields := md.Fields()
	seen := map[protoreflect.FieldNumber]string{}
	oneofs := map[protoreflect.FullName]string{}
	for _, k := range keys {
		p := fieldPath(path, k)
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByTextName(k)
		}
		if fd == nil {
			return nil, specError(path, "unknown field %q%s", k, suggestField(md, k))
		}
		if other, dup := seen[fd.Number()]; dup {
			return nil, specError(path, "field %q given twice (as %q and %q)", fd.JSONName(), other, k)
		}
		seen[fd.Number()] = k
		if obj[k] == nil {
			continue
		}
		if oo := fd.ContainingOneof(); oo != nil && !oo.IsSynthetic() {
			if other, dup := oneofs[oo.FullName()]; dup {
				return nil, specError(path, "%q and %q are alternatives: give only one of %s", other, k, oneofNames(oo))
			}
			oneofs[oo.FullName()] = k
		}
		nv, err := normalizeField(fd, obj[k], p)
		if err != nil {
			return nil, err
		}
		obj[k] = nv
	}
	return obj, nil
}

// normalizeField walks the value of one field: a map, a list or a single
// value.
func normalizeField(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, specError(path, "want a map, got %s", jsonType(v))
		}
		for _, k := range sortedKeys(obj) {
			nv, err := normalizeValue(fd.MapValue(), obj[k], fmt.Sprintf("%s[%q]", path, k))
			if err != nil {
				return nil, err
			}
			obj[k] = nv
		}
		return obj, nil
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return nil, specError(path, "want a list, got %s", jsonType(v))
		}
		for i, ev := range list {
			nv, err := normalizeValue(fd, ev, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			list[i] = nv
		}
		return list, nil
	}
	return normalizeValue(fd, v, path)
}

// normalizeValue checks one value of fd's kind.
func normalizeValue(fd protoreflect.FieldDescriptor, v any, path string) (any, error) {
	if v == nil {
		return nil, specError(path, "want a value, got null")
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return normalizeMessage(fd.Message(), v, path)
	case protoreflect.EnumKind:
		switch x := v.(type) {
		case string:
			return resolveEnum(fd.Enum(), x, path)
		case json.Number:
			return x, nil
		}
		return nil, specError(path, "want one of %s, got %s", strings.Join(enumShortNames(fd.Enum()), ", "), jsonType(v))
	case protoreflect.StringKind:
		switch x := v.(type) {
		case string:
			return x, nil
		case json.Number:
			if _, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
				return x.String(), nil
			}
			return nil, specError(path, "want a string, got the number %s (quote it)", x)
		}
		return nil, specError(path, "want a string, got %s (quote it)", jsonType(v))
	case protoreflect.BoolKind:
		if _, ok := v.(bool); ok {
			return v, nil
		}
		return nil, specError(path, "want true or false, got %s", jsonType(v))
	case protoreflect.BytesKind:
		if _, ok := v.(string); ok {
			return v, nil
		}
		return nil, specError(path, "want base64 text, got %s", jsonType(v))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch x := v.(type) {
		case json.Number:
			return x, nil
		case string:
			if _, err := strconv.ParseFloat(x, 64); err == nil || x == "NaN" || x == "Infinity" || x == "-Infinity" {
				return x, nil
			}
		}
		return nil, specError(path, "want a number, got %s", jsonType(v))
	default: // the integer kinds
		var text string
		switch x := v.(type) {
		case json.Number:
			text = x.String()
		case string:
			text = x
		default:
			return nil, specError(path, "want an integer, got %s", jsonType(v))
		}
		if err := checkInteger(fd.Kind(), text); err != nil {
			return nil, specError(path, "%v", err)
		}
		return v, nil
	}
}

// checkInteger checks that text is an integer in the range of kind.
func checkInteger(kind protoreflect.Kind, text string) error {
	var lo, hi float64
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		lo, hi = math.MinInt32, math.MaxInt32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		lo, hi = 0, math.MaxUint32
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if _, err := strconv.ParseInt(text, 10, 64); err == nil {
			return nil
		}
		lo, hi = math.MinInt64, math.MaxInt64
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if _, err := strconv.ParseUint(text, 10, 64); err == nil {
			return nil
		}
		lo, hi = 0, math.MaxUint64
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(f) {
		return fmt.Errorf("want an integer, got %q", text)
	}
	if f != math.Trunc(f) || f < lo || f > hi {
		return fmt.Errorf("%s is not a %s", text, kind)
	}
	return nil
}

// resolveEnum returns the proto name of the value of ed that s names: the
// full name, or a spelling whose squashed form (upper case, no separators)
// is that of the tail of exactly one value name after an underscore.
func resolveEnum(ed protoreflect.EnumDescriptor, s, path string) (string, error) {
	values := ed.Values()
	if values.ByName(protoreflect.Name(s)) != nil {
		return s, nil
	}
	want := squash(s)
	var matches []string
	for i := range values.Len() {
		name := string(values.Get(i).Name())
		for tail := name; ; {
			if squash(tail) == want {
				matches = append(matches, name)
				break
			}
			_, rest, ok := strings.Cut(tail, "_")
			if !ok {
				break
			}
			tail = rest
		}
	}
	switch {
	case want != "" && len(matches) == 1:
		return matches[0], nil
	case len(matches) > 1:
		return "", specError(path, "ambiguous value %q (matches %s)", s, strings.Join(matches, ", "))
	}
	return "", specError(path, "unknown value %q (want one of %s)", s, strings.Join(enumShortNames(ed), ", "))
}

// squash upper-cases s and drops the separators "-", "_", "." and " ".
func squash(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', '.', ' ':
			return -1
		}
		return unicode.ToUpper(r)
	}, s)
}

// enumPrefix is the prefix value names of ed share by convention:
// RestartMode → "RESTART_MODE_".
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	var b strings.Builder
	name := string(ed.Name())
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String() + "_"
}

// enumShortNames lists ed's values in their short form (on-failure), leaving
// out the unspecified zero value.
func enumShortNames(ed protoreflect.EnumDescriptor) []string {
	prefix := enumPrefix(ed)
	values := ed.Values()
	var names []string
	for i := range values.Len() {
		name := string(values.Get(i).Name())
		short := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, prefix), "_", "-"))
		if values.Get(i).Number() == 0 && short == "unspecified" {
			continue
		}
		names = append(names, short)
	}
	return names
}

func oneofNames(oo protoreflect.OneofDescriptor) string {
	var names []string
	for i := range oo.Fields().Len() {
		names = append(names, oo.Fields().Get(i).JSONName())
	}
	return strings.Join(names, ", ")
}

// suggestField names the field of md that k most likely meant, when one
// squashes to the same letters.
func suggestField(md protoreflect.MessageDescriptor, k string) string {
	want := squash(k)
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		if squash(fd.JSONName()) == want {
			return fmt.Sprintf(" (did you mean %q?)", fd.JSONName())
		}
	}
	return ""
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkWellKnown checks v, the JSON form of the well-known type md (such as
// a google.protobuf.Timestamp), with protojson.
func checkWellKnown(md protoreflect.MessageDescriptor, v any, path string) error {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil // not linked in: protojson reports it when it decodes the job
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return specError(path, "%v", err)
	}
	if err := protojson.Unmarshal(raw, mt.New().Interface()); err != nil {
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, "): "); ok {
			msg = after // drop protojson's "proto: (line 1:2)" position in our re-encoding
		}
		return specError(path, "%s", msg)
	}
	return nil
}
