package norsktest_test

import (
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/norsk-go/norsk-manager/internal/testcluster"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
	"github.com/norsk-go/norsk-manager/sdk/norsk/norsktest"
)

// The fake answers the cloud calls as a Manager with no cloud provider
// and no overrides file does (how a Manager starts by default): the same
// code for each request, checked here against a real in-process Manager.
func TestFakeCloudCallsAnswerAsAManagerWithoutClouds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fake, err := norsk.Connect(ctx, norsk.Settings{URL: norsktest.NewServer(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	real := testcluster.New(t, testcluster.Options{}).Client()

	calls := []struct {
		name string
		call func(context.Context, *norsk.Manager) error
		want connect.Code
	}{
		{"aws create", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.CreateAwsNode(ctx, norsk.AwsNode{Region: "eu-west-1", InstanceType: "c6i.large"})
			return err
		}, connect.CodeFailedPrecondition},
		{"oci create without a domain", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.CreateOciNode(ctx, norsk.OciNode{Shape: "VM.Standard2.1"})
			return err
		}, connect.CodeInvalidArgument},
		{"oci create", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.CreateOciNode(ctx, norsk.OciNode{AvailabilityDomain: "AD-1", Shape: "VM.Standard2.1"})
			return err
		}, connect.CodeFailedPrecondition},
		{"describe without a type", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.DescribeInstanceType(ctx, " ", norsk.InstanceTypeOptions{})
			return err
		}, connect.CodeInvalidArgument},
		{"describe", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.DescribeInstanceType(ctx, "c6i.large", norsk.InstanceTypeOptions{})
			return err
		}, connect.CodeFailedPrecondition},
		{"list types", func(ctx context.Context, m *norsk.Manager) error {
			_, _, err := m.ListInstanceTypes(ctx, norsk.InstanceTypeOptions{Provider: "oci"})
			return err
		}, connect.CodeFailedPrecondition},
		{"security groups without a region", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.ListWorkerSecurityGroups(ctx, "")
			return err
		}, connect.CodeInvalidArgument},
		{"security groups", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.ListWorkerSecurityGroups(ctx, "eu-west-1")
			return err
		}, connect.CodeFailedPrecondition},
		{"reload", func(ctx context.Context, m *norsk.Manager) error {
			_, err := m.ReloadExternalConfig(ctx)
			return err
		}, connect.CodeFailedPrecondition},
	}
	for _, c := range calls {
		for side, m := range map[string]*norsk.Manager{"fake": fake, "manager": real} {
			err := c.call(ctx, m)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != c.want {
				t.Errorf("%s on the %s: %v, want %v", c.name, side, err, c.want)
			}
		}
	}
}
