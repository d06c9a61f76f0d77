// Package apibounds checks every field of a request message against a table
// of bounds before a handler sees it: the lengths and characters of strings,
// the sizes of bytes, how many entries a repeated or map field holds, the
// range of numbers (doubles must be finite), that enums hold a value the
// schema names, and that timestamps are valid. It is the Manager API's one
// generic validation layer; the rules that need meaning (an id's form, a
// job's services) stay with the handlers and pkg/jobspec.
//
// A table has defaults per kind of field and rules per field (by its full
// name) or per field name (every field so named); the first that names a
// field wins. Refusals are apierr InvalidArgument errors naming the field by
// its API (JSON) path ("bundle.jobs[2].job.services[0].workingDir") and
// quoting at most a short prefix of the bad value.
//
// The package is pure (no I/O, no clock).
package apibounds

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Chars is what a string may contain. Every string must be valid UTF-8.
type Chars uint8

const (
	// Line: no control characters at all (names, ids, paths, addresses,
	// secrets).
	Line Chars = iota
	// Text: control characters only tab, line feed and carriage return
	// (descriptions, reasons, payloads).
	Text
	// NoNUL: anything but NUL (command arguments, environment values, KV
	// keys: what the OS or the store can carry).
	NoNUL
)

func (c Chars) String() string {
	switch c {
	case Line:
		return "printable (no control characters)"
	case Text:
		return "text (no control characters but tab and line breaks)"
	case NoNUL:
		return "no NUL"
	}
	return fmt.Sprintf("Chars(%d)", uint8(c))
}

// Unbounded as a MaxLen leaves a field bounded by the request's size alone.
const Unbounded = math.MaxInt

// Rule bounds one field. Zero members take the table's defaults.
type Rule struct {
	// MaxLen bounds a string or bytes value in bytes (each element of a
	// repeated field).
	MaxLen int
	// MinLen is the least length of a non-empty string or bytes value (an
	// empty one is "not given"; handlers decide whether that is allowed).
	MinLen int
	// Chars is what a string may contain (default Line).
	Chars Chars
	// MaxItems bounds the entries of a repeated or map field.
	MaxItems int
	// Range bounds a number (integers and floating point alike).
	Range *Range
	// Key and Value rule a map's keys and values.
	Key, Value *Rule
	// Secret: a refusal never quotes the value.
	Secret bool
	// Note says what the bound stands for (documentation).
	Note string
}

// Range is an inclusive numeric range.
type Range struct{ Min, Max float64 }

// Str is a string of at most max bytes, printable.
func Str(max int) Rule { return Rule{MaxLen: max, Chars: Line} }

// TextOf is a string of at most max bytes that may hold line breaks and
// tabs.
func TextOf(max int) Rule { return Rule{MaxLen: max, Chars: Text} }

// Arg is a string of at most max bytes with anything but NUL.
func Arg(max int) Rule { return Rule{MaxLen: max, Chars: NoNUL} }

// Bytes is a bytes field of at most max bytes.
func Bytes(max int) Rule { return Rule{MaxLen: max} }

// Between is a number from min to max, inclusive.
func Between(min, max float64) Rule { return Rule{Range: &Range{min, max}} }

// Items bounds a repeated field's entries (each element ruled by r).
func (r Rule) Items(n int) Rule { r.MaxItems = n; return r }

// AtLeast sets MinLen.
func (r Rule) AtLeast(n int) Rule { r.MinLen = n; return r }

// Secretly marks the field secret: refusals never quote it.
func (r Rule) Secretly() Rule { r.Secret = true; return r }

// Because sets the note.
func (r Rule) Because(note string) Rule { r.Note = note; return r }

// Map is a map of at most n entries, keys and values ruled by key and
// value.
func Map(n int, key, value Rule) Rule { return Rule{MaxItems: n, Key: &key, Value: &value} }

// Defaults are the bounds of fields no rule names.
type Defaults struct {
	// String bounds strings (and each element of repeated strings).
	String Rule
	// Bytes bounds bytes fields.
	Bytes Rule
	// Items bounds repeated fields; MapItems, MapKey and MapValue maps.
	Items    int
	MapItems int
	MapKey   Rule
	MapValue Rule
}

// Table is a set of bounds.
type Table struct {
	Defaults Defaults
	// Fields rules fields by full name ("norsk.manager.v1.Service.working_dir").
	Fields map[protoreflect.FullName]Rule
	// Names rules every field of a name ("job_id") that Fields does not.
	Names map[protoreflect.Name]Rule

	cache sync.Map // protoreflect.MessageDescriptor → []Rule
}

// rule is the rule of field f, defaults filled in.
func (t *Table) rule(f protoreflect.FieldDescriptor) Rule {
	r, ok := t.Fields[f.FullName()]
	if !ok {
		r, ok = t.Names[f.Name()]
	}
	if f.IsMap() {
		if r.MaxItems == 0 {
			r.MaxItems = t.Defaults.MapItems
		}
		k, v := t.Defaults.MapKey, t.Defaults.MapValue
		if r.Key != nil {
			k = fill(*r.Key, t.Defaults.MapKey)
		}
		if r.Value != nil {
			v = fill(*r.Value, t.Defaults.MapValue)
		}
		r.Key, r.Value = &k, &v
		return r
	}
	if f.IsList() && r.MaxItems == 0 {
		r.MaxItems = t.Defaults.Items
	}
	switch f.Kind() {
	case protoreflect.StringKind:
		if r.MaxLen == 0 {
			r.MaxLen = t.Defaults.String.MaxLen
		}
	case protoreflect.BytesKind:
		if r.MaxLen == 0 {
			r.MaxLen = t.Defaults.Bytes.MaxLen
		}
	}
	return r
}

// fill gives r's unset length the default's.
func fill(r, def Rule) Rule {
	if r.MaxLen == 0 {
		r.MaxLen = def.MaxLen
	}
	return r
}

// RuleOf is the rule the table applies to field f (defaults filled in).
func (t *Table) RuleOf(f protoreflect.FieldDescriptor) Rule { return t.rule(f) }

// rules are the rules of a message's fields, by field index, remembered
// per message (a table does not change once in use).
func (t *Table) rules(md protoreflect.MessageDescriptor) []Rule {
	if rs, ok := t.cache.Load(md); ok {
		return rs.([]Rule)
	}
	fields := md.Fields()
	rs := make([]Rule, fields.Len())
	for i := range rs {
		rs[i] = t.rule(fields.Get(i))
	}
	t.cache.Store(md, rs)
	return rs
}

// Check walks m and returns the first field out of bounds (fields in
// schema order, map entries in key order), or nil. A first walk visits the
// fields set in any order; only when it finds one out of bounds does a
// second, in order, name the first.
func (t *Table) Check(m proto.Message) error {
	if m == nil {
		return nil
	}
	c := checker{t: t}
	if c.message(m.ProtoReflect()) == nil {
		return nil
	}
	c = checker{t: t, ordered: true}
	return c.message(m.ProtoReflect())
}

// seg is one step of the path to the value being checked: a field, a list
// index or a map key.
type seg struct {
	field string
	index int
	key   string
	kind  byte // 'f', 'i', 'k'
}

// checker walks one message; the path is built only for a refusal.
type checker struct {
	t    *Table
	path []seg
	// ordered: fields in schema order and map entries in key order (else
	// as they come).
	ordered bool
}

func (c *checker) push(s seg) { c.path = append(c.path, s) }
func (c *checker) pop()       { c.path = c.path[:len(c.path)-1] }

// at is the JSON path of the value being checked.
func (c *checker) at() string {
	var b strings.Builder
	for _, s := range c.path {
		switch s.kind {
		case 'f':
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.field)
		case 'i':
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		case 'k':
			b.WriteString(keyPath(s.key))
		}
	}
	return b.String()
}

func (c *checker) invalid(format string, args ...any) error {
	return apierr.Invalid(c.at(), format, args...)
}

func (c *checker) message(m protoreflect.Message) error {
	md := m.Descriptor()
	if md.FullName() == "google.protobuf.Timestamp" {
		return c.timestamp(m)
	}
	rules := c.t.rules(md)
	if !c.ordered {
		var err error
		m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if f.IsExtension() {
				return true
			}
			c.push(seg{kind: 'f', field: f.JSONName()})
			if err = c.field(f, &rules[f.Index()], v); err == nil {
				c.pop()
			}
			return err == nil
		})
		return err
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if !m.Has(f) {
			continue
		}
		c.push(seg{kind: 'f', field: f.JSONName()})
		if err := c.field(f, &rules[i], m.Get(f)); err != nil {
			return err
		}
		c.pop()
	}
	return nil
}

func (c *checker) field(f protoreflect.FieldDescriptor, r *Rule, v protoreflect.Value) error {
	switch {
	case f.IsMap():
		return c.mapField(f, r, v.Map())
	case f.IsList():
		l := v.List()
		if l.Len() > r.MaxItems {
			return c.invalid("has %d entries (at most %d)", l.Len(), r.MaxItems)
		}
		for j := 0; j < l.Len(); j++ {
			c.push(seg{kind: 'i', index: j})
			if err := c.value(f, r, l.Get(j)); err != nil {
				return err
			}
			c.pop()
		}
		return nil
	}
	return c.value(f, r, v)
}

func (c *checker) mapField(f protoreflect.FieldDescriptor, r *Rule, m protoreflect.Map) error {
	if m.Len() > r.MaxItems {
		return c.invalid("has %d entries (at most %d)", m.Len(), r.MaxItems)
	}
	if !c.ordered {
		var err error
		m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			err = c.entryProblem(f, r, k, v)
			return err == nil
		})
		return err
	}
	type entry struct {
		k protoreflect.MapKey
		s string
	}
	entries := make([]entry, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		entries = append(entries, entry{k, k.String()})
		return true
	})
	sort.Slice(entries, func(i, j int) bool { return entries[i].s < entries[j].s })
	for _, e := range entries {
		if f.MapKey().Kind() == protoreflect.StringKind {
			if problem := stringProblem(*r.Key, e.s); problem != "" {
				return c.invalid("key %s %s", apierr.Quote(e.s), problem)
			}
		}
		c.push(seg{kind: 'k', key: e.s})
		if err := c.value(f.MapValue(), r.Value, m.Get(e.k)); err != nil {
			return err
		}
		c.pop()
	}
	return nil
}

// entryProblem checks one map entry (unordered), its path left as it was.
func (c *checker) entryProblem(f protoreflect.FieldDescriptor, r *Rule, k protoreflect.MapKey, v protoreflect.Value) error {
	if f.MapKey().Kind() == protoreflect.StringKind && stringProblem(*r.Key, k.String()) != "" {
		return errBad
	}
	depth := len(c.path)
	c.push(seg{kind: 'k', key: k.String()})
	err := c.value(f.MapValue(), r.Value, v)
	c.path = c.path[:depth]
	return err
}

// errBad marks a map entry out of bounds before it is named.
var errBad = errors.New("out of bounds")

// keyPath is a map entry's path after its map: ".key" for a plain key,
// else ["key"] (quoted, cut short).
func keyPath(k string) string {
	plain := k != "" && len(k) <= 64
	for _, r := range k {
		if !(r == '_' || r == '-' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			plain = false
			break
		}
	}
	if plain {
		return "." + k
	}
	return "[" + apierr.Quote(k) + "]"
}

// value checks one value of field f (a singular field, a list element or a
// map value).
func (c *checker) value(f protoreflect.FieldDescriptor, r *Rule, v protoreflect.Value) error {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return c.message(v.Message())
	case protoreflect.StringKind:
		if problem := stringProblem(*r, v.String()); problem != "" {
			return c.invalid("%s", problem)
		}
	case protoreflect.BytesKind:
		b := v.Bytes()
		switch {
		case len(b) > r.MaxLen:
			return c.invalid("is %d bytes (at most %d)", len(b), r.MaxLen)
		case len(b) > 0 && len(b) < r.MinLen:
			return c.invalid("is %d bytes (at least %d)", len(b), r.MinLen)
		}
	case protoreflect.EnumKind:
		n := v.Enum()
		if f.Enum().Values().ByNumber(n) == nil {
			return c.invalid("%d is not a %s value (known: %s)", n, f.Enum().Name(), enumNames(f.Enum()))
		}
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		x := v.Float()
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return c.invalid("%v is not a finite number", x)
		}
		if r.Range != nil && (x < r.Range.Min || x > r.Range.Max) {
			return c.invalid("%v is out of range (%s to %s)", x, num(r.Range.Min), num(r.Range.Max))
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if x := v.Int(); r.Range != nil && (float64(x) < r.Range.Min || float64(x) > r.Range.Max) {
			return c.invalid("%d is out of range (%s to %s)", x, num(r.Range.Min), num(r.Range.Max))
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if x := v.Uint(); r.Range != nil && (float64(x) < r.Range.Min || float64(x) > r.Range.Max) {
			return c.invalid("%d is out of range (%s to %s)", x, num(r.Range.Min), num(r.Range.Max))
		}
	}
	return nil
}

// num prints a bound without an exponent.
func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// stringProblem says what is wrong with s under r ("" if nothing).
func stringProblem(r Rule, s string) string {
	switch {
	case len(s) > r.MaxLen:
		return fmt.Sprintf("is %d bytes (at most %d)", len(s), r.MaxLen)
	case len(s) > 0 && len(s) < r.MinLen:
		return fmt.Sprintf("is %d bytes (at least %d)", len(s), r.MinLen)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	for i, c := range s {
		bad := false
		switch r.Chars {
		case Line:
			bad = isControl(c)
		case Text:
			bad = isControl(c) && c != '\t' && c != '\n' && c != '\r'
		case NoNUL:
			bad = c == 0
		}
		if bad {
			msg := fmt.Sprintf("holds control character U+%04X at byte %d (it must be %s)", c, i, r.Chars)
			if !r.Secret {
				msg += ": " + apierr.Quote(s)
			}
			return msg
		}
	}
	return ""
}

// isControl: C0, DEL and C1 control characters, and the Unicode line and
// paragraph separators.
func isControl(c rune) bool {
	return c < 0x20 || c >= 0x7f && c < 0xa0 || c == 0x2028 || c == 0x2029
}

func enumNames(e protoreflect.EnumDescriptor) string {
	vals := e.Values()
	names := make([]string, 0, vals.Len())
	for i := 0; i < vals.Len(); i++ {
		names = append(names, string(vals.Get(i).Name()))
	}
	return strings.Join(names, ", ")
}

// Timestamps are valid from 0001-01-01 to 9999-12-31, as protobuf's JSON
// form (RFC 3339) allows.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

func (c *checker) timestamp(m protoreflect.Message) error {
	fs := m.Descriptor().Fields()
	secs := m.Get(fs.ByName("seconds")).Int()
	nanos := m.Get(fs.ByName("nanos")).Int()
	switch {
	case secs < minTimestampSeconds || secs > maxTimestampSeconds:
		return c.invalid("%d s is not a time from year 1 to 9999", secs)
	case nanos < 0 || nanos >= 1e9:
		return c.invalid("nanos %d is out of range (0 to 999999999)", nanos)
	}
	return nil
}

// Fields calls fn for every field reachable from the messages (each once,
// in schema order, depth first): for checking a table names real fields and
// for documenting it.
func Fields(fn func(protoreflect.FieldDescriptor), roots ...protoreflect.MessageDescriptor) {
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fs := md.Fields()
		for i := 0; i < fs.Len(); i++ {
			f := fs.Get(i)
			fn(f)
			switch {
			case f.IsMap():
				if v := f.MapValue(); v.Kind() == protoreflect.MessageKind {
					walk(v.Message())
				}
			case f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind:
				walk(f.Message())
			}
		}
	}
	for _, md := range roots {
		walk(md)
	}
}
