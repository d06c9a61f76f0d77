package norsk_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testJob is the smallest job the Manager accepts: one service.
func testJob(id string) *norsk.Job {
	return &norsk.Job{JobId: id, Services: []*norsk.Service{{Name: "main", Image: "hello:dev"}}}
}
