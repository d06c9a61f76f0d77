package cli

import (
	"strings"
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// -o wide prints every list with more columns (kubectl's habit); a command
// without a wide form prints its table.
func TestOutputWide(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.AddNode(&managerv1.Node{NodeId: "node-1", NodeName: "w1", Address: "10.0.0.1:7000", Runtime: "docker", WorkerVersion: "0.9.1",
		Hardware:   &managerv1.Hardware{Vcpus: 8, MemoryBytes: 16 << 30, Architecture: managerv1.Architecture_ARCHITECTURE_AARCH_64},
		Tags:       map[string]string{"pool": "gold"},
		HeldImages: []*managerv1.HeldImage{{Ref: "docker.io/library/nginx:1"}, {Ref: "x:2"}},
		Cloud:      &managerv1.CloudInstance{Region: "eu-north-1", InstanceType: "c7g.2xlarge"}})
	f.ok("job", "create", "-f", writeFile(t, "news.yaml", newsSpec))
	f.ok("job", "start", "news-1", "--node", "node-1")
	f.ok("bundle", "create", "-f", writeFile(t, "b.yaml", "bundleId: evening\njobs: [{jobName: solo, job: {services: [{name: main, command: [sleep, '60']}]}}]"))
	f.ok("kv", "put", "cfg", "k", "v")

	for _, tc := range []struct {
		args     []string
		patterns []string
	}{
		{[]string{"job", "list", "-o", "wide"}, []string{
			`(?m)^ID\s+STATE\s+INSTANCES\s+NODES\s+IMAGES\s+RESTARTS\s+AGE\s+UPDATED\s+HASH\s+PLACEMENT\s+TAGS\s+DESCRIPTION$`,
			`(?m)^news-1\s+active\s+primary running\s+node-1\s+nginx\s+0\s+3m ago\s+3m ago\s+\d+\s+manual\s+channel=news\s+News channel$`}},
		{[]string{"node", "list", "-o", "wide"}, []string{
			`(?m)^ID\s+NAME\s+PROVIDER\s+POOL\s+STATE\s+SINCE\s+ADDRESS\s+RUNTIME\s+VERSION\s+ARCH\s+TYPE\s+REGION\s+CPUS\s+MEMORY\s+LOAD\s+JOBS\s+HELD\s+LAST SEEN\s+TAGS$`,
			`(?m)^node-1\s+w1\s+cluster\s+gold\s+online\s+3m ago\s+10.0.0.1:7000\s+docker\s+0.9.1\s+aarch-64\s+c7g.2xlarge\s+eu-north-1\s+8\s+16.0 GiB\s+-\s+1\s+2\s+`}},
		{[]string{"bundle", "list", "-o", "wide"}, []string{
			`(?m)^BUNDLE\s+STATE\s+POOL\s+REPLICAS\s+JOBS\s+PLACED\s+NODES\s+REVISION\s+AGE\s+STOPS\s+LEASE$`,
			`(?m)^evening\s+live\s+-\s+1\s+1\s+0/1\s+-\s+\d+\s+`}},
		{[]string{"migration", "list", "-o", "wide"}, []string{
			`(?m)^ID\s+JOB\s+STRATEGY\s+PHASE\s+FROM\s+TO\s+ROLES\s+STARTED\s+TOOK\s+NO RETURN\s+BY\s+REASON$`}},
		{[]string{"kv", "list", "cfg", "-o", "wide"}, []string{
			`(?m)^KEY\s+REVISION\s+CREATED AT\s+SIZE\s+VALUE$`, `(?m)^k\s+\d+\s+\d+\s+1\s+v$`}},
		{[]string{"audit", "log", "-o", "wide"}, []string{
			`(?m)^SEQ\s+TIME\s+SOURCE\s+CALLER\s+TOKEN\s+KIND\s+HASH\s+PREV\s+PAYLOAD$`, `(?m)^\d+\s+\S+\s+api\s+.*KvCommit\s`}},
		{[]string{"cluster", "status", "-o", "wide"}, []string{
			`(?m)^NAME\s+ROLE\s+REACHABLE\s+VOTER\s+WITNESS\s+APPLIED\s+GENERATION\s+LAST CONTACT\s+RAFT\s+API\s+CONTROL PLANE$`}},
		// No wide form: the table.
		{[]string{"token", "list", "-o", "wide"}, []string{`(?m)^ID\s+NAME\s+ROLE\s+CREATED`}},
	} {
		matches(t, strings.Join(tc.args, " "), f.ok(tc.args...), tc.patterns...)
	}
}
