package norsk_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// Job hashes and KV revisions were int64 on the wire before they joined
// the SDK's other store indexes and fencing tokens as uint64 (decision
// 0049). What a client built with the int64 schema sends (a varint; a
// decimal string in JSON) reads the same with the uint64 one, and back.
func TestIndexTypesWireCompatible(t *testing.T) {
	t.Parallel()
	const v = 1 << 40
	// Binary: an int64 field of a non-negative value is the varint of it.
	for _, tc := range []struct {
		name  string
		field protowire.Number
		msg   proto.Message
		get   func(proto.Message) uint64
	}{
		{"Job.current_hash", 7, &managerv1.Job{}, func(m proto.Message) uint64 { return m.(*managerv1.Job).GetCurrentHash() }},
		{"JobHash.hash", 1, &managerv1.JobHash{}, func(m proto.Message) uint64 { return m.(*managerv1.JobHash).GetHash() }},
		{"KvEntry.revision", 3, &managerv1.KvEntry{}, func(m proto.Message) uint64 { return m.(*managerv1.KvEntry).GetRevision() }},
		{"KvWrite.expected_revision", 4, &managerv1.KvWrite{}, func(m proto.Message) uint64 { return m.(*managerv1.KvWrite).GetExpectedRevision() }},
		{"KvCommitResponse.revision", 1, &managerv1.KvCommitResponse{}, func(m proto.Message) uint64 { return m.(*managerv1.KvCommitResponse).GetRevision() }},
		{"Instance.job_hash", 15, &managerv1.Instance{}, func(m proto.Message) uint64 { return m.(*managerv1.Instance).GetJobHash() }},
	} {
		old := protowire.AppendVarint(protowire.AppendTag(nil, tc.field, protowire.VarintType), uint64(int64(v)))
		if err := proto.Unmarshal(old, tc.msg); err != nil || tc.get(tc.msg) != v {
			t.Errorf("%s: the int64 encoding of %d reads %d, %v", tc.name, v, tc.get(tc.msg), err)
		}
		if now, _ := proto.Marshal(tc.msg); string(now) != string(old) {
			t.Errorf("%s: encodes as % x, the int64 schema as % x", tc.name, now, old)
		}
	}
	// JSON: both are decimal strings (and numbers are accepted).
	for _, in := range []string{`{"currentHash":"1099511627776"}`, `{"currentHash":1099511627776}`} {
		var j managerv1.Job
		if err := protojson.Unmarshal([]byte(in), &j); err != nil || j.GetCurrentHash() != v {
			t.Errorf("%s reads %d, %v", in, j.GetCurrentHash(), err)
		}
	}
	out, _ := protojson.Marshal(&managerv1.KvEntry{Revision: v})
	var buf bytes.Buffer
	if err := json.Compact(&buf, out); err != nil || buf.String() != `{"revision":"1099511627776"}` {
		t.Errorf("KvEntry JSON = %s, %v", out, err)
	}
}
