package nodes

import (
	"context"
	"fmt"

	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// recordImages records what the worker reported of its images since the
// last batch: each prefetch outcome (its event, then the node's images
// after it), then the newest inventory. A write the FSM refuses is logged
// and dropped (the next report carries the whole inventory again); a write
// that fails ends the session, as a report's does.
func (cn *conn) recordImages(ctx context.Context, s *sessionState) error {
	pre, inv := s.prefetched, s.images
	s.prefetched, s.images = nil, nil
	for _, p := range pre {
		cmd := &storev1.Command{Cmd: &storev1.Command_RecordImagesPrefetched{RecordImagesPrefetched: &storev1.RecordImagesPrefetched{Prefetched: p}}}
		if err := cn.applyImages(ctx, cmd); err != nil {
			return fmt.Errorf("record the prefetch %s of node %s: %w", p.GetRequestId(), cn.nodeID, err)
		}
	}
	if inv == nil {
		return nil
	}
	cmd := &storev1.Command{Cmd: &storev1.Command_SetNodeImages{SetNodeImages: &storev1.SetNodeImages{NodeId: cn.nodeID, Images: inv.GetImages()}}}
	if err := cn.applyImages(ctx, cmd); err != nil {
		return fmt.Errorf("record the images of node %s: %w", cn.nodeID, err)
	}
	return nil
}

// applyImages applies an image command; a refusal by the store is logged
// and dropped (the worker's next report carries its whole inventory again),
// any other failure is returned.
func (cn *conn) applyImages(ctx context.Context, cmd *storev1.Command) error {
	_, err := cn.c.apply(ctx, cmd)
	switch {
	case err == nil:
		return nil
	case apierr.Is(err, apierr.InvalidArgument), apierr.Is(err, apierr.NotFound), apierr.Is(err, apierr.FailedPrecondition):
		cn.log.Warn("the store refused a worker's image report; dropped", "err", err)
		return nil
	}
	return err
}
