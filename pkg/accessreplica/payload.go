package accessreplica

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
)

// snapshotPayload is a snapshot's decompressed payload; Roles is canonical.
type snapshotPayload struct {
	Version uint64
	Roles   []byte
}

type deltaOp struct {
	Op    string          `json:"op"`
	Key   *string         `json:"key"`
	Value json.RawMessage `json:"value"`
}

type deltaPayload struct {
	From uint64
	To   uint64
	Ops  []deltaOp
}

type attestationPayload struct {
	Version uint64
}

// decodeSnapshot gunzips (at most MaxRolesBytes) and decodes a snapshot.
func decodeSnapshot(payload []byte) (*snapshotPayload, error) {
	zr, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		return nil, invalid(PartSnapshot, "payload is not gzip: %v", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, MaxRolesBytes+1))
	if err != nil {
		return nil, invalid(PartSnapshot, "payload does not decompress: %v", err)
	}
	if len(raw) > MaxRolesBytes {
		return nil, invalid(PartSnapshot, "payload decompresses to more than %d bytes", MaxRolesBytes)
	}
	var doc struct {
		Version *uint64         `json:"version"`
		Roles   json.RawMessage `json:"roles"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, invalid(PartSnapshot, `payload is not the JSON {"version": n, "roles": {…}}: %v`, err)
	}
	if doc.Version == nil || *doc.Version == 0 {
		return nil, invalid(PartSnapshot, "payload has no version (versions start at 1)")
	}
	roles, err := canonicalObject(doc.Roles)
	if err != nil {
		return nil, invalid(PartSnapshot, "roles: %v", err)
	}
	return &snapshotPayload{Version: *doc.Version, Roles: roles}, nil
}

// decodeDelta decodes a delta payload.
func decodeDelta(payload []byte) (*deltaPayload, error) {
	var doc struct {
		From *uint64   `json:"from"`
		To   *uint64   `json:"to"`
		Ops  []deltaOp `json:"ops"`
	}
	if err := json.Unmarshal(payload, &doc); err != nil {
		return nil, invalid(PartDelta, `payload is not the JSON {"from": m, "to": n, "ops": [...]}: %v`, err)
	}
	switch {
	case doc.From == nil || doc.To == nil:
		return nil, invalid(PartDelta, `payload needs "from" and "to"`)
	case *doc.To <= *doc.From:
		return nil, invalid(PartDelta, "goes from version %d to %d (not forward)", *doc.From, *doc.To)
	}
	for i, op := range doc.Ops {
		if op.Key == nil {
			return nil, invalid(PartDelta, "ops[%d] has no key", i)
		}
		switch op.Op {
		case "put":
			if len(op.Value) == 0 {
				return nil, invalid(PartDelta, "ops[%d] puts %q without a value", i, *op.Key)
			}
			if !json.Valid(op.Value) {
				return nil, invalid(PartDelta, "ops[%d]: the value is not JSON", i)
			}
		case "delete":
			if len(op.Value) != 0 {
				return nil, invalid(PartDelta, "ops[%d] deletes %q and carries a value", i, *op.Key)
			}
		default:
			return nil, invalid(PartDelta, `ops[%d]: op %q (want "put" or "delete")`, i, op.Op)
		}
	}
	return &deltaPayload{From: *doc.From, To: *doc.To, Ops: doc.Ops}, nil
}

// decodeAttestation decodes an attestation payload.
func decodeAttestation(payload []byte) (*attestationPayload, error) {
	var doc struct {
		Version *uint64 `json:"version"`
	}
	if err := json.Unmarshal(payload, &doc); err != nil {
		return nil, invalid(PartAttestation, `payload is not the JSON {"version": n}: %v`, err)
	}
	if doc.Version == nil || *doc.Version == 0 {
		return nil, invalid(PartAttestation, "payload has no version (versions start at 1)")
	}
	return &attestationPayload{Version: *doc.Version}, nil
}

// checkDelta applies d to the roles of its "from" version and requires the
// result to be want (canonical).
func checkDelta(d *deltaPayload, fromRoles, want []byte) error {
	roles := map[string]json.RawMessage{}
	if len(fromRoles) > 0 {
		if err := json.Unmarshal(fromRoles, &roles); err != nil || roles == nil {
			return invalid(PartDelta, "the roles of version %d held are not a JSON object", d.From)
		}
	}
	for i, op := range d.Ops {
		switch op.Op {
		case "put":
			roles[*op.Key] = op.Value
		case "delete":
			if _, ok := roles[*op.Key]; !ok {
				return invalid(PartDelta, "does not apply: ops[%d] deletes %q, which version %d does not hold", i, *op.Key, d.From)
			}
			delete(roles, *op.Key)
		}
	}
	b, err := json.Marshal(roles)
	if err != nil {
		return invalid(PartDelta, "does not apply: %v", err)
	}
	got, err := canonicalObject(b)
	if err != nil {
		return invalid(PartDelta, "does not apply: %v", err)
	}
	if !bytes.Equal(got, want) {
		return invalid(PartDelta, "does not apply: version %d with its ops is not the snapshot's roles", d.From)
	}
	return nil
}

// canonicalObject re-encodes a JSON object canonically: keys sorted, no
// insignificant white space, no HTML escaping, numbers as written.
func canonicalObject(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("not a JSON object")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the object")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
