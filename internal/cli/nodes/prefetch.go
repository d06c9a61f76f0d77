package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-go/norsk-manager/internal/cli/cmdutil"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// newNodePrefetchCommand is `node prefetch NODE IMAGE…`: tell a node's worker
// to pull images now, and follow each ref's outcome.
func newNodePrefetchCommand(g *cmdutil.Globals) *cobra.Command {
	var (
		noWait  bool
		waitFor time.Duration
	)
	c := &cobra.Command{
		Use:   "prefetch NODE IMAGE...",
		Short: "Pull images onto a node now, so that a later start there finds them local",
		Long: `Tell the node's worker to pull these images now (the Manager's PrefetchImages),
then follow each image's outcome as the worker reports it: one line per image,
pulled (with its digest, size and how long it took), already present, or
failed with the registry's answer. One image failing never stops the others;
the command exits non-zero when any failed. The node's held images (node get)
update right after each.

With --no-wait the command returns once the worker has been told, printing
the request's id and the store index to follow (norsk-ctl events --after N).`,
		Example: `  norsk-ctl node prefetch edge-1 127.0.0.1:5000/norsk/encoder:v3 127.0.0.1:5000/norsk/packager:v3
  norsk-ctl node prefetch edge-1 registry.example.com/encoder:v3 --wait 30m`,
		Args:              cmdutil.MinArgs("NODE", "IMAGE"),
		ValidArgsFunction: g.CompleteNodeIDs,
		Annotations:       cmdutil.TakesIDs("node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if waitFor <= 0 {
				return cmdutil.UsageErrorf("--wait must be positive")
			}
			node, refs := args[0], args[1:]
			res, err := cmdutil.Ask(g, cmd, func(ctx context.Context, m *norsk.Manager) (*norsk.PrefetchImagesResponse, error) {
				return m.PrefetchImages(ctx, node, refs)
			}, "prefetch on node %s", node)
			if err != nil {
				return err
			}
			if noWait {
				return g.Printer().Print(cmdutil.Result{Data: res, Table: func(w io.Writer) {
					fmt.Fprintf(w, "Node %s's worker is pulling %d image(s) (request %s); follow with: norsk-ctl events --after %d\n",
						node, len(refs), res.GetRequestId(), res.GetIndex())
				}})
			}
			if g.Human() {
				fmt.Fprintf(g.Out, "Node %s's worker is pulling %d image(s) (request %s)\n", node, len(refs), res.GetRequestId())
			}
			results, err := followPrefetch(g, cmd.Context(), node, res, len(refs), waitFor)
			if err != nil {
				return err
			}
			return prefetchVerdict(results)
		},
	}
	c.Flags().BoolVar(&noWait, "no-wait", false, "return once the worker has been told")
	c.Flags().DurationVar(&waitFor, "wait", 15*time.Minute, "how long to follow the outcomes")
	return c
}

// followPrefetch follows the event stream from the request's index until
// every ref has an outcome, printing each as it comes (table: a line per
// ref; json/yaml: the results at the end).
func followPrefetch(g *cmdutil.Globals, ctx context.Context, node string, res *norsk.PrefetchImagesResponse, want int, timeout time.Duration) ([]*norsk.ImagePrefetchResult, error) {
	m, err := g.Manager(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s := m.EventStream(ctx, norsk.EventStreamSettings{AfterIndex: res.GetIndex()})
	defer s.Close()
	table := g.Human()
	var got []*norsk.ImagePrefetchResult
	for len(got) < want && s.Next() {
		p := s.Event().GetImagesPrefetched()
		if p == nil || p.GetRequestId() != res.GetRequestId() {
			continue
		}
		for _, r := range p.GetResults() {
			got = append(got, r)
			if table {
				fmt.Fprintf(g.Out, "  [%d/%d] %s: %s\n", len(got), want, r.GetRef(), cmdutil.PrefetchOutcome(r))
			}
		}
	}
	if len(got) < want {
		err := s.Err()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, norsk.ErrDeadlineExceeded) {
			return got, fmt.Errorf("%d of %d image(s) still pulling on node %s after %s (request %s); follow with 'norsk-ctl events --after %d'",
				want-len(got), want, node, timeout, res.GetRequestId(), res.GetIndex())
		}
		if err != nil {
			return got, fmt.Errorf("following prefetch %s: %w", res.GetRequestId(), err)
		}
		return got, fmt.Errorf("the event stream ended while following prefetch %s", res.GetRequestId())
	}
	if !table {
		out := make([]proto.Message, len(got))
		for i, r := range got {
			out[i] = r
		}
		if err := g.Printer().Print(cmdutil.Result{Data: out}); err != nil {
			return got, err
		}
	}
	return got, nil
}

// prefetchVerdict is the command's end: an error naming the refs that
// failed, nil when none did.
func prefetchVerdict(results []*norsk.ImagePrefetchResult) error {
	var failed []string
	for _, r := range results {
		if r.GetOutcome() == norsk.ImagePrefetchFailed {
			failed = append(failed, r.GetRef())
		}
	}
	if len(failed) == 0 {
		return nil
	}
	slices.Sort(failed)
	return fmt.Errorf("%d of %d image(s) not pulled: %s", len(failed), len(results), strings.Join(failed, ", "))
}

// heldSummary is a node's images for the node list: their short names, at
// most three, and how many more.
func heldSummary(images []*norsk.HeldImage) string {
	if len(images) == 0 {
		return "-"
	}
	names := make([]string, 0, 3)
	for _, h := range images[:min(len(images), 3)] {
		names = append(names, cmdutil.ShortImage(h.GetRef()))
	}
	s := strings.Join(names, ",")
	if len(images) > 3 {
		s += fmt.Sprintf(" +%d", len(images)-3)
	}
	return s
}

// heldImagesTable lists a node's images for node get.
func heldImagesTable(w io.Writer, now time.Time, images []*norsk.HeldImage) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "IMAGE	DIGEST	SIZE	LAST USED")
	for _, h := range images {
		used := "-"
		if h.GetLastUsed() != nil {
			used = cmdutil.Ago(now, h.GetLastUsed())
		}
		fmt.Fprintf(w, "%s	%s	%s	%s\n", cmdutil.ShortImage(h.GetRef()), cmdutil.ShortDigest(h.GetDigest()), cmdutil.BytesIEC(h.GetSizeBytes()), used)
	}
}
