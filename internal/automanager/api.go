package automanager

import (
	"context"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// API is the part of the Manager's client API the AutoManager uses.
// *norsk.Manager implements it; every method may be called concurrently.
type API interface {
	ListNodes(ctx context.Context) ([]*norsk.Node, error)
	JobSearch(ctx context.Context, s norsk.JobSearchSettings) ([]*norsk.JobWithHistory, error)
	JobById(ctx context.Context, jobID string) (*norsk.JobWithHistory, error)
	UpdateJob(ctx context.Context, job *norsk.Job) (uint64, error)
	StartJob(ctx context.Context, jobID, role, nodeID string, opts norsk.StartJobOptions) (uint64, error)
	StartJobs(ctx context.Context, starts []norsk.Start) ([]norsk.StartOutcome, error)
	CreateMockNode(ctx context.Context, n norsk.MockNode) (nodeID, host string, err error)
	CreateAwsNode(ctx context.Context, n norsk.AwsNode) (*norsk.CloudNode, error)
	CreateOciNode(ctx context.Context, n norsk.OciNode) (*norsk.CloudNode, error)
	CreateCloudHypervisorNode(ctx context.Context, n norsk.CloudHypervisorNode) (*norsk.CloudNode, error)
	SetNodeTags(ctx context.Context, nodeID string, tags map[string]string) (*norsk.Node, error)
	PrefetchImages(ctx context.Context, nodeID string, imageRefs []string) (*norsk.PrefetchImagesResponse, error)
	StopJob(ctx context.Context, jobID, role, nodeID string, opts norsk.StopJobOptions) error
	MarkJobFailed(ctx context.Context, jobID, reason string) error
	ListBundles(ctx context.Context) ([]*managerv1.BundleWithJobs, error)
	BundleById(ctx context.Context, bundleID string) (*managerv1.BundleWithJobs, error)
	DeleteBundle(ctx context.Context, bundleID string) error
	GetLeaseStatus(ctx context.Context) (*managerv1.LeaseStatus, error)
	EventStream(ctx context.Context, s norsk.EventStreamSettings) *norsk.EventStream

	// Migration (seed 004's saga runs through these).
	StartPreparedJob(ctx context.Context, jobID, role, nodeID string) error
	NotifyMigrationGetState(ctx context.Context, source *managerv1.JobKey, migrationID string) error
	NotifyMigrationCutoverReady(ctx context.Context, source *managerv1.JobKey, migrationID string, payload []byte) error
	NotifyMigrationCutoverApply(ctx context.Context, target *managerv1.JobKey, migrationID string, payload []byte) error
	AbortMigration(ctx context.Context, jobID, sourceRole, targetRole, reason, migrationID string) error
	RecordMigration(ctx context.Context, st *managerv1.MigrationState, expectedRevision uint64, create bool) (uint64, error)
	ListMigrations(ctx context.Context, jobID string) ([]*managerv1.MigrationState, error)
	GetMigration(ctx context.Context, migrationID string) (*managerv1.MigrationState, error)

	// Node drains (drain.go): the progress write-back.
	RecordNodeDrain(ctx context.Context, d *managerv1.NodeDrain, expectedRevision uint64) (uint64, error)
}

var _ API = (*norsk.Manager)(nil)
