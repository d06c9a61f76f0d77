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
	UpdateJob(ctx context.Context, job *norsk.Job) (int64, error)
	StartJob(ctx context.Context, jobID, role, nodeID string, opts norsk.StartJobOptions) (uint64, error)
	StartJobs(ctx context.Context, starts []norsk.Start) ([]norsk.StartOutcome, error)
	CreateMockNode(ctx context.Context, n norsk.MockNode) (nodeID, host string, err error)
	StopJob(ctx context.Context, jobID, role, nodeID string, opts norsk.StopJobOptions) error
	MarkJobFailed(ctx context.Context, jobID, reason string) error
	ListBundles(ctx context.Context) ([]*managerv1.BundleWithJobs, error)
	DeleteBundle(ctx context.Context, bundleID string) error
	GetLeaseStatus(ctx context.Context) (*managerv1.LeaseStatus, error)
	EventStream(ctx context.Context, s norsk.EventStreamSettings) *norsk.EventStream
}

var _ API = (*norsk.Manager)(nil)
