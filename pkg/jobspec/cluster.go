package jobspec

import (
	"net/url"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Paging of GetClusterEvents.
const (
	DefaultClusterEvents = 100
	MaxClusterEvents     = 1000
)

// ValidateControlPlaneURL checks AnnounceControlPlane's URL: http(s) with a
// host.
func ValidateControlPlaneURL(raw string) error {
	u, err := url.Parse(raw)
	if raw == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return apierr.Invalid("url", "%s is not an http(s) URL", apierr.Quote(raw))
	}
	return nil
}

// ClusterEventsQuery checks GetClusterEvents' request and answers its page
// size (DefaultClusterEvents when unset) and its since (zero when unset).
func ClusterEventsQuery(q *managerv1.GetClusterEventsRequest) (limit int, since time.Time, err error) {
	limit = int(q.GetLimit())
	switch {
	case limit == 0:
		limit = DefaultClusterEvents
	case limit > MaxClusterEvents:
		return 0, time.Time{}, apierr.Invalid("limit", "%d is more than %d", limit, MaxClusterEvents)
	}
	if ts := q.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return 0, time.Time{}, apierr.Invalid("since", "%v", err)
		}
		since = ts.AsTime()
	}
	return limit, since, nil
}
