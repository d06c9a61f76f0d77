package norsktest

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apiauth"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// The fake's security calls: tokens, the discovery fleet and its rotation,
// and access replicas. They keep what they are given in memory and answer
// as the Manager does for well-formed requests; they verify no signature
// (the real Manager's pkg/accessreplica does). Unit tests only.

type securityState struct {
	tokens    map[string]*managerv1.ApiToken
	secrets   map[string]string // token id → its secret
	fleet     *managerv1.DiscoveryFleet
	replicaV  uint64
	published []*managerv1.AccessReplicaPublication
}

func (s *Server) sec() *securityState {
	if s.security == nil {
		s.security = &securityState{tokens: map[string]*managerv1.ApiToken{}, secrets: map[string]string{}}
	}
	return s.security
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateToken implements the Manager service.
func (s *Server) CreateToken(_ context.Context, req *connect.Request[managerv1.CreateTokenRequest]) (*connect.Response[managerv1.CreateTokenResponse], error) {
	if err := jobspec.ValidateTokenRequest(req.Msg.GetName(), req.Msg.GetRole(), req.Msg.GetTtlS()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tok := &managerv1.ApiToken{Id: randHex(8), Name: req.Msg.GetName(), Role: req.Msg.GetRole(), CreatedAt: timestamppb.New(s.now())}
	if ttl := req.Msg.GetTtlS(); ttl > 0 {
		tok.ExpiresAt = timestamppb.New(s.now().Add(time.Duration(ttl) * time.Second))
	}
	secret := randHex(32)
	s.sec().tokens[tok.GetId()] = tok
	s.sec().secrets[tok.GetId()] = secret
	return connect.NewResponse(&managerv1.CreateTokenResponse{Token: proto.Clone(tok).(*managerv1.ApiToken), Secret: "nmt_" + tok.GetId() + "." + secret}), nil
}

// ListTokens implements the Manager service.
func (s *Server) ListTokens(context.Context, *connect.Request[managerv1.ListTokensRequest]) (*connect.Response[managerv1.ListTokensResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.ListTokensResponse{}
	for _, id := range sortedIDs(s.sec().tokens) {
		out.Tokens = append(out.Tokens, proto.Clone(s.sec().tokens[id]).(*managerv1.ApiToken))
	}
	return connect.NewResponse(out), nil
}

// RevokeToken implements the Manager service.
func (s *Server) RevokeToken(_ context.Context, req *connect.Request[managerv1.RevokeTokenRequest]) (*connect.Response[managerv1.RevokeTokenResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.sec().tokens[req.Msg.GetId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no token %q", req.Msg.GetId()))
	}
	t.Revoked, t.RevokedAt = true, timestamppb.New(s.now())
	return connect.NewResponse(&managerv1.RevokeTokenResponse{}), nil
}

// PublishDiscoveryFleet implements the Manager service.
func (s *Server) PublishDiscoveryFleet(_ context.Context, req *connect.Request[managerv1.PublishDiscoveryFleetRequest]) (*connect.Response[managerv1.PublishDiscoveryFleetResponse], error) {
	f := req.Msg.GetFleet()
	if err := jobspec.ValidateDiscoveryFleet(f); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sec()
	if st.fleet == nil {
		st.fleet = proto.Clone(f).(*managerv1.DiscoveryFleet)
		return connect.NewResponse(&managerv1.PublishDiscoveryFleetResponse{Fleet: proto.Clone(st.fleet).(*managerv1.DiscoveryFleet)}), nil
	}
	kept := f.GetTierSecret() != st.fleet.GetTierSecret() || f.GetLeafToken() != st.fleet.GetLeafToken()
	st.fleet.Addresses, st.fleet.Address = f.GetAddresses(), f.GetAddress()
	return connect.NewResponse(&managerv1.PublishDiscoveryFleetResponse{Fleet: proto.Clone(st.fleet).(*managerv1.DiscoveryFleet), SecretsKept: kept}), nil
}

// GetDiscoveryFleet implements the Manager service.
func (s *Server) GetDiscoveryFleet(context.Context, *connect.Request[managerv1.GetDiscoveryFleetRequest]) (*connect.Response[managerv1.GetDiscoveryFleetResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &managerv1.GetDiscoveryFleetResponse{}
	if f := s.sec().fleet; f != nil {
		out.Fleet = proto.Clone(f).(*managerv1.DiscoveryFleet)
	}
	return connect.NewResponse(out), nil
}

// RotateDiscoveryTierSecret implements the Manager service.
func (s *Server) RotateDiscoveryTierSecret(_ context.Context, req *connect.Request[managerv1.RotateDiscoveryTierSecretRequest]) (*connect.Response[managerv1.RotateDiscoveryTierSecretResponse], error) {
	if err := jobspec.ValidateRotation(req.Msg.GetStep(), req.Msg.GetNewTierSecret()); err != nil {
		return nil, refuse(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.sec().fleet
	if f == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("no discovery fleet has been published"))
	}
	order := func(want string) error {
		if f.GetRotationPhase() != want {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("step out of order (the rotation is at %q)", f.GetRotationPhase()))
		}
		return nil
	}
	switch req.Msg.GetStep() {
	case "stage":
		if err := order(""); err != nil {
			return nil, err
		}
		n := req.Msg.GetNewTierSecret()
		if n == "" {
			n = randHex(32)
		}
		f.TierSecretAlt, f.RotationPhase = n, "stage"
	case "flip":
		if err := order("stage"); err != nil {
			return nil, err
		}
		f.TierSecret, f.TierSecretAlt, f.RotationPhase = f.GetTierSecretAlt(), f.GetTierSecret(), "flip"
	case "finish":
		if err := order("flip"); err != nil {
			return nil, err
		}
		f.TierSecretAlt, f.RotationPhase = "", ""
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("step: %q is not stage, flip or finish", req.Msg.GetStep()))
	}
	return connect.NewResponse(&managerv1.RotateDiscoveryTierSecretResponse{Fleet: proto.Clone(f).(*managerv1.DiscoveryFleet)}), nil
}

// PublishAccessReplica implements the Manager service: it counts versions
// and keeps what it is given, verifying nothing.
func (s *Server) PublishAccessReplica(_ context.Context, req *connect.Request[managerv1.PublishAccessReplicaRequest]) (*connect.Response[managerv1.PublishAccessReplicaResponse], error) {
	p := req.Msg.GetPublication()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sec()
	switch {
	case p.GetSnapshotJws() != "":
		st.replicaV++
		st.published = append(st.published, proto.Clone(p).(*managerv1.AccessReplicaPublication))
		return connect.NewResponse(&managerv1.PublishAccessReplicaResponse{Version: st.replicaV, Changed: true}), nil
	case p.GetAttestationJws() != "" && st.replicaV > 0:
		return connect.NewResponse(&managerv1.PublishAccessReplicaResponse{Version: st.replicaV}), nil
	}
	return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the publication does not move forward"))
}

// callerToken authenticates a call made with a token CreateToken made
// ("nmt_<id>.<secret>"), as the Manager does: ok false when cred is not
// one; otherwise the token, or the Manager's refusal of a revoked or
// expired one. The caller holds s.mu.
func (s *Server) callerToken(cred string) (tok *managerv1.ApiToken, ok bool, err error) {
	id, secret, found := strings.Cut(strings.TrimPrefix(cred, "nmt_"), ".")
	if !found || !strings.HasPrefix(cred, "nmt_") {
		return nil, false, nil
	}
	tok = s.sec().tokens[id]
	if tok == nil || subtle.ConstantTimeCompare([]byte(secret), []byte(s.sec().secrets[id])) != 1 {
		return nil, false, nil
	}
	if err := apiauth.TokenRefusal(tok, s.now()); err != nil {
		return nil, true, err
	}
	return tok, true, nil
}
