package norsk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// Connect to the Manager, create a job from a YAML spec and start it on a
// node.
func Example() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{
		URL:   "http://127.0.0.1:6790", // or "" for $NORSK_MANAGER_URL
		Token: os.Getenv("NORSK_TOKEN"),
	})
	if errors.Is(err, norsk.ErrIncompatible) {
		log.Fatalf("upgrade norsk-ctl or the Manager: %v", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	job, err := norsk.DecodeJobSpec([]byte(`
jobId: news-1
tags: {channel: news}
services:
  - name: encoder
    image: registry.example.com/encoder:1.2
    restart: {mode: on-failure, count: 3, periodS: 60}
    ports: [{containerPort: 5000, protocol: udp}]
`))
	if err != nil {
		log.Fatal(err)
	}
	hash, err := m.CreateJob(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	token, err := m.StartJob(ctx, "news-1", "primary", "node-1", norsk.StartJobOptions{})
	switch {
	case errors.Is(err, norsk.ErrFailedPrecondition):
		log.Fatalf("the node cannot take the job now: %v", err)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Printf("job news-1 at hash %d, started with fencing token %d\n", hash, token)
}

// What the connection reached: the Manager's build and protocol, known
// once connected, and how its protocol compares with this SDK's.
func ExampleManager_Version() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	v := m.Version()
	fmt.Printf("Manager %s (commit %s), protocol %s\n", v.GetLabel(), v.GetCommit(), m.Hello().GetProtocolVersion())
	if s := m.Skew(); s.Minor != 0 {
		fmt.Println(s) // e.g. "Manager protocol 1.7 is 3 minor versions older than this SDK's 1.10: …"
	}
	if _, _, err := m.ListInstanceTypes(ctx, norsk.InstanceTypeOptions{Provider: "mock"}); errors.Is(err, norsk.ErrUnimplemented) {
		fmt.Println("this Manager predates instance-type lists:", err)
	}
}

// Find the running jobs of one channel.
func ExampleManager_JobSearch() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	jobs, err := m.JobSearch(ctx, norsk.JobSearchSettings{
		Filters: []*norsk.JobFilter{
			norsk.TagEq("channel", "news"),
			norsk.TagAbsent("retired"),
			norsk.IdRegex("news-[0-9]+"),
		},
		Limit: 100,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		fmt.Println(j.GetJob().GetJobId(), j.GetJob().GetState())
	}
}

// Follow the event stream: a snapshot of every job and node, then live
// events. The stream reconnects by itself; the loop sees each event once.
func ExampleManager_EventStream() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	s := m.EventStream(ctx, norsk.EventStreamSettings{})
	defer s.Close()
	for s.Next() {
		ev := s.Event()
		switch k := ev.GetKind().(type) {
		case *norsk.Event_JobSnapshot:
			fmt.Println("job", k.JobSnapshot.GetJob().GetJobId())
		case *norsk.Event_InitialDataComplete:
			if k.InitialDataComplete.GetResync() {
				fmt.Println("resynchronised: forget what came before")
			}
			fmt.Println("snapshot complete at index", k.InitialDataComplete.GetIndex())
		case *norsk.Event_JobUpdated:
			if r := k.JobUpdated.GetEntry().GetRunning(); r != nil {
				fmt.Println(k.JobUpdated.GetJob().GetJob().GetJobId(), "running on", r.GetInstance().GetNodeId())
			}
		}
	}
	if err := s.Err(); err != nil {
		log.Fatal(err)
	}
}

// Drain a node in the Manager (make-before-break, two jobs at a time,
// whatever has not moved after 30 minutes stopped) and follow it to its
// end. The drain runs in the Manager: this program may stop following at
// any time, and calling DrainNode again re-attaches.
func ExampleManager_DrainNode() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	d, attached, err := m.DrainNode(ctx, "encoder-7", norsk.DrainOptions{Deadline: 30 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	if attached {
		fmt.Println("a drain was already running: following it")
	}
	s := m.EventStream(ctx, norsk.EventStreamSettings{AfterIndex: d.GetRevision(), SkipSnapshot: true})
	defer s.Close()
	for d.GetState() == norsk.DrainRunning && s.Next() {
		if u := s.Event().GetNodeDrainUpdated(); u.GetNodeId() == "encoder-7" {
			d = u
			fmt.Println(d.GetSummary())
		}
	}
	if d.GetState() != norsk.DrainDrained {
		for _, it := range d.GetItems() {
			if it.GetResult() != norsk.DrainItemMoved && it.GetResult() != norsk.DrainItemGone {
				fmt.Println(it.GetJobId(), norsk.DrainItemResultName(it.GetResult()), it.GetReason())
			}
		}
	}
}

// Start a job and wait for it to run, then migrate it and wait for the
// migration to end: both waits follow the event stream (no polling). A
// stream opened before an act, filtered to one job by the Manager, sees
// what the act did.
func ExampleManager_WaitForJob() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	s := m.EventStream(ctx, norsk.EventStreamSettings{SkipSnapshot: true, JobIDs: []string{"news.channel.0"}})
	defer s.Close()

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	job, err := m.WaitForJob(wctx, "news.channel.0", "primary", norsk.InstancePhaseRunning)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("running:", job.GetInstances())
	st, err := m.MigrateJob(ctx, "news.channel.0", norsk.MigrateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	st, err = m.WaitForMigration(wctx, st.GetMigrationId())
	switch {
	case err != nil:
		log.Fatal(err)
	case st.GetPhase() == norsk.PhaseAborted:
		log.Fatalf("migration aborted: %s", st.GetAbortReason())
	}
	fmt.Println("moved to", st.GetTargetNodeId())

	// What the stream saw of it, meanwhile.
	for s.Next() {
		ev := s.Event()
		fmt.Println(ev.GetIndex(), norsk.EventKindOf(ev), norsk.EventNodeIDs(ev))
		if norsk.EventMigration(ev).GetPhase() == norsk.PhaseDone {
			break
		}
	}
}

// Read a key, then update it only if nobody wrote it meanwhile; create
// another only if it does not exist — in one all-or-nothing commit.
func ExampleManager_KvCommit() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	var rev uint64 // 0: the key must not exist
	cur, err := m.KvGet(ctx, "app", "config/region")
	switch {
	case err == nil:
		rev = cur.GetRevision()
	case !errors.Is(err, norsk.ErrNotFound): // absent: create it
		log.Fatal(err)
	}
	newRev, err := m.KvCommit(ctx, "app", []norsk.KvWrite{
		norsk.KvPut("config/region", []byte("eu-north-1")).IfRevision(rev),
		norsk.KvPut("lock/migration", []byte("me")).IfAbsent(),
	}, norsk.KvCommitOptions{}.ExpectingSchema(1))
	switch {
	case errors.Is(err, norsk.ErrFailedPrecondition):
		log.Fatalf("someone else wrote first; read again: %v", err)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println("written at revision", newRev)
}

// Re-check the audit log's hash chain here rather than trust the Manager.
func ExampleManager_VerifyAuditLog() {
	ctx := context.Background()
	m, err := norsk.Connect(ctx, norsk.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	v, err := m.VerifyAuditLog(ctx)
	if v.Broken != nil {
		log.Fatalf("audit log tampered with: first broken entry %d: %s", v.Broken.Seq, v.Broken.Reason)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("verified %d entries from checkpoint seq %d\n", v.Checked, v.CheckpointSeq())
}
