package auth

import (
	"testing"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apiauth"
)

// Every RPC of the descriptor names who may call it; the table has them all.
func TestAuthzTableCoversTheDescriptor(t *testing.T) {
	t.Parallel()
	table, err := apiauth.BuildTable()
	if err != nil {
		t.Fatal(err)
	}
	want := managerv1.File_norsk_manager_v1_manager_proto.Services().ByName("Manager").Methods().Len() +
		managerv1.File_norsk_manager_v1_cluster_proto.Services().ByName("Members").Methods().Len()
	if got := len(table); got != want {
		t.Fatalf("table has %d procedures, the services %d", got, want)
	}
}
