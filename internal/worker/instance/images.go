package instance

import (
	"fmt"
	"time"

	"github.com/norsk-go/norsk-manager/internal/runtime"
)

// pullNoticeEvery is how often a pull's progress reaches the job's history
// while it runs.
const pullNoticeEvery = 2 * time.Second

// pullNotices turns an instance's pull progress into "image-pull" notices
// for the job's history: the first news of each pull, then at most one
// every pullNoticeEvery (and at each layer finished, no more often), and
// its end or failure.
func (in *instance) pullNotices() func(runtime.PullProgress) {
	key, token := in.key, in.rec.token()
	host, clk := in.sup.host, in.sup.clock
	last := map[string]time.Time{}
	return func(p runtime.PullProgress) {
		now := clk.Now()
		var msg string
		switch {
		case p.Err != nil:
			msg = fmt.Sprintf("service %s: %v", p.Service, p.Err)
		case p.Done:
			msg = fmt.Sprintf("service %s: pulled %s: %d layers, %s in %s", p.Service, p.Image, p.Layers, bytesText(p.BytesTotal), p.Elapsed.Round(time.Millisecond))
		default:
			if t, seen := last[p.Image]; seen && now.Sub(t) < pullNoticeEvery {
				return
			}
			msg = fmt.Sprintf("service %s: pulling %s: %d/%d layers, %s of %s", p.Service, p.Image, p.LayersDone, p.Layers, bytesText(p.Bytes), bytesText(p.BytesTotal))
		}
		last[p.Image] = now
		host.Notify(key, token, noticeImagePull, msg)
	}
}

// noticeImagePull is the kind of the notices of a start's pulls.
const noticeImagePull = "image-pull"

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// markJobImagesUsed records that the instance's images were used (its
// containers were created from them).
func (in *instance) markJobImagesUsed() {
	var refs []string
	for _, s := range in.rec.job().GetServices() {
		if s.GetImage() != "" {
			refs = append(refs, s.GetImage())
		}
	}
	if len(refs) > 0 {
		in.sup.host.ImagesUsed(refs)
	}
}
