package kv

import "testing"

func TestParseCommitFile(t *testing.T) {
	t.Parallel()
	writes, opts, err := parseCommitFile([]byte("setSchemaVersion: 4\nwrites:\n- {key: k, put: v, expectedRevision: 7}\n- {key: d, delete: true}\n"))
	if err != nil || len(writes) != 2 || string(writes[0].Value) != "v" || *writes[0].ExpectedRevision != 7 || !writes[1].Delete || writes[1].ExpectedRevision != nil ||
		opts.ExpectSchemaVersion != nil || *opts.SetSchemaVersion != 4 {
		t.Errorf("parseCommitFile = %+v, %+v, %v", writes, opts, err)
	}
}
