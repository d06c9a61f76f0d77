package state_test

import (
	"bytes"
	"testing"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

func cAddHost(name, token string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_AddHostAgent{AddHostAgent: &storev1.AddHostAgent{Name: name, Token: token}}}
}

func cRegisterHost(name, token, url, secret string) *storev1.Command {
	return &storev1.Command{Cmd: &storev1.Command_RegisterHostAgent{RegisterHostAgent: &storev1.RegisterHostAgent{Name: name, Token: token, Url: url, Secret: secret}}}
}

// A host agent is added with a one-shot token, registers with it once
// (its URL and secret recorded), survives a snapshot, and is removed.
func TestHostAgents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := state.HostAgentTokenPrefix + "0123456789abcdef0123"
	f.must(cAddHost("enc-01", tok))
	f.refused(cAddHost("enc-01", tok), apierr.AlreadyExists, "enc-01")
	f.refused(cAddHost("Enc 01", tok), apierr.InvalidArgument, "name")
	f.refused(cRegisterHost("enc-01", "nht_wrong", "http://h:6797", "s"), apierr.Unauthenticated, "enc-01")
	f.refused(cRegisterHost("enc-01", tok, "h:6797", "s"), apierr.InvalidArgument, "url")
	f.must(cRegisterHost("enc-01", tok, "http://h:6797", "secret-1"))
	f.refused(cRegisterHost("enc-01", tok, "http://h:6797", "secret-2"), apierr.Unauthenticated, "already been used")
	h := f.read().HostAgent("enc-01")
	if h == nil || !h.GetTokenUsed() || h.GetUrl() != "http://h:6797" || h.GetSecret() != "secret-1" || h.GetRegisteredAt() == nil {
		t.Fatalf("host agent %v", h)
	}
	if f.read().HostAgentByToken(tok).GetName() != "enc-01" {
		t.Error("HostAgentByToken")
	}
	g := state.New(state.Limits{})
	if _, err := g.Restore(bytes.NewReader(f.snap())); err != nil {
		t.Fatal(err)
	}
	if r := g.Snapshot().HostAgent("enc-01"); r.GetSecret() != "secret-1" {
		t.Errorf("after a snapshot round trip: %v", r)
	}
	f.must(&storev1.Command{Cmd: &storev1.Command_RemoveHostAgent{RemoveHostAgent: &storev1.RemoveHostAgent{Name: "enc-01"}}})
	if len(f.read().HostAgents()) != 0 {
		t.Error("removed host agent still listed")
	}
	f.refused(&storev1.Command{Cmd: &storev1.Command_RemoveHostAgent{RemoveHostAgent: &storev1.RemoveHostAgent{Name: "enc-01"}}}, apierr.NotFound, "enc-01")
}
