package norsktest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/jobspec"
)

// SetPrefetchFailure makes the fake's simulated workers fail to pull ref
// with reason (the registry's answer); "" clears it.
func (s *Server) SetPrefetchFailure(ref, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prefetchFail == nil {
		s.prefetchFail = map[string]string{}
	}
	if reason == "" {
		delete(s.prefetchFail, ref)
		return
	}
	s.prefetchFail[ref] = reason
}

// PrefetchImages implements the Manager service: the simulated worker
// "pulls" at once. A ref the node holds is already present, one
// SetPrefetchFailure names fails with its reason, any other is pulled (a
// digest made from the ref, size 0) and joins the node's held images. The
// outcome is an images_prefetched event, then node_images_updated.
func (s *Server) PrefetchImages(_ context.Context, req *connect.Request[managerv1.PrefetchImagesRequest]) (*connect.Response[managerv1.PrefetchImagesResponse], error) {
	refs := req.Msg.GetImageRefs()
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.requireNode(req.Msg.GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := jobspec.ValidateImageRefs(refs); err != nil {
		return nil, refuse(err)
	}
	if n.GetState() != managerv1.NodeState_NODE_STATE_ONLINE {
		return nil, errorf(connect.CodeFailedPrecondition, "node %q is not online: its worker cannot pull", n.GetNodeId())
	}
	s.nextID++
	id := fmt.Sprintf("pf-%d", s.nextID)
	told := s.index
	out := &managerv1.ImagesPrefetched{NodeId: n.GetNodeId(), RequestId: id}
	for _, ref := range refs {
		res := &managerv1.ImagePrefetchResult{Ref: ref}
		i := slices.IndexFunc(n.HeldImages, func(h *managerv1.HeldImage) bool { return h.GetRef() == ref })
		switch {
		case i >= 0:
			res.Outcome = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_ALREADY_PRESENT
			res.Digest, res.SizeBytes = n.HeldImages[i].GetDigest(), n.HeldImages[i].GetSizeBytes()
		case s.prefetchFail[ref] != "":
			res.Outcome = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_FAILED
			res.Error = fmt.Sprintf("pull image %q: %s", ref, s.prefetchFail[ref])
		default:
			sum := sha256.Sum256([]byte(ref))
			d := "sha256:" + hex.EncodeToString(sum[:])
			res.Outcome = managerv1.ImagePrefetchOutcome_IMAGE_PREFETCH_OUTCOME_PULLED
			res.Digest = d
			n.HeldImages = append(n.HeldImages, &managerv1.HeldImage{Ref: ref, Digest: d, ImageId: d, LastUsed: timestamppb.New(s.now())})
		}
		out.Results = append(out.Results, res)
	}
	slices.SortFunc(n.HeldImages, func(a, b *managerv1.HeldImage) int { return strings.Compare(a.GetRef(), b.GetRef()) })
	i := s.nextIndex()
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_ImagesPrefetched{ImagesPrefetched: out}})
	s.emit(i, &managerv1.Event{Kind: &managerv1.Event_NodeImagesUpdated{NodeImagesUpdated: &managerv1.NodeEvent{Node: proto.Clone(n).(*managerv1.Node), Reason: "images prefetched"}}})
	return connect.NewResponse(&managerv1.PrefetchImagesResponse{RequestId: id, Index: told}), nil
}
