package sim

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// memberMetrics reads a member's /metrics once and returns, for each
// prefix, the series whose names start with it, keyed as exposed (name
// and labels) without the prefix. (The AutoManager's counters are the
// final primary's: they count its own term only, and a failover starts
// them again.)
func memberMetrics(ctx context.Context, url string, prefixes ...string) ([]map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("sim: metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sim: metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sim: metrics: %s", resp.Status)
	}
	out := make([]map[string]float64, len(prefixes))
	for k := range out {
		out[k] = map[string]float64{}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		k := slices.IndexFunc(prefixes, func(p string) bool { return strings.HasPrefix(line, p) })
		if k < 0 {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[k][strings.TrimPrefix(line[:i], prefixes[k])] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: metrics: %w", err)
	}
	return out, nil
}

// writeEventWindow prints what the final primary's event broker holds at
// the end (decision 0066): how far back a subscriber could resume then,
// events dropped younger than the retention over its life, and the
// subscribers it sent a resync snapshot.
func writeEventWindow(p func(string, ...any), m map[string]float64) {
	if len(m) == 0 {
		return
	}
	p("event window (the final primary's, at the end): %.0f events held, %.1f MiB estimated, the oldest %s old; %.0f dropped younger than the retention; %.0f resyncs served",
		m["events_held"], m["events_held_bytes"]/(1<<20), (time.Duration(m["events_oldest_age_seconds"] * float64(time.Second))).Round(time.Second),
		m["events_dropped_early_total"], m["event_resyncs_total"])
}

// writeAutoManager prints the passes the final primary's AutoManager made:
// how many, their time, the jobs they planned, and the full passes by why.
func writeAutoManager(p func(string, ...any), m map[string]float64) {
	if len(m) == 0 {
		return
	}
	p("automanager (the final primary's term): %.0f passes, %.1f s in them, %.0f jobs planned; %.0f full passes, %.1f s in them",
		m["passes_total"], m["pass_seconds_sum"], m["pass_jobs_sum"], m["reconcile_seconds_count"], m["reconcile_seconds_sum"])
	var why []string
	for _, r := range []string{"start", "reconcile", "failed", "resync", "burst"} {
		if n := m[`reconciles_total{reason="`+r+`"}`]; n > 0 {
			why = append(why, fmt.Sprintf("%s %.0f", r, n))
		}
	}
	if len(why) > 0 {
		p("      full passes by why: %s", strings.Join(why, ", "))
	}
}
