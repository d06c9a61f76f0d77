package manager

import (
	"strings"
	"testing"
)

func TestClusterConfigDefaults(t *testing.T) {
	t.Parallel()
	nodes := []ClusterNode{{Name: "m1", Raft: "m1:6792", API: "http://m1:6790"}, {Name: "m2", Raft: "m2:6792", API: "http://m2:6790"}}
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"ok", Config{NodeName: "m1", ClusterNodes: nodes, ClusterSecret: "0123456789abcdef"}, ""},
		{"not in clusterNodes", Config{NodeName: "m9", ClusterNodes: nodes, ClusterSecret: "0123456789abcdef"}, "not in clusterNodes"},
		{"no secret", Config{NodeName: "m1", ClusterNodes: nodes}, "needs clusterSecret"},
		{"a short secret", Config{NodeName: "m1", ClusterNodes: nodes, ClusterSecret: "short"}, "at least 16"},
		{"a bad cluster state", Config{NodeName: "m1", ClusterNodes: nodes, ClusterSecret: "0123456789abcdef", ClusterState: "joining"}, "want new or existing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			err := tc.cfg.defaults()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.cfg.RaftListen != ":6792" || tc.cfg.RaftAdvertise != "m1:6792" {
					t.Errorf("raft listen %q advertise %q, want :6792 and m1:6792", tc.cfg.RaftListen, tc.cfg.RaftAdvertise)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}
