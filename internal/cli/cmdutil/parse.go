package cmdutil

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SplitKV splits "key=value" (the value may be empty; the key may not).
func SplitKV(flag, kv string) (string, string, error) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return "", "", UsageErrorf("%s %q: want KEY=VALUE", flag, kv)
	}
	return k, v, nil
}

// ParseWhen reads a point in time: RFC 3339, a day (UTC), or a duration
// before now ("90m", "1h", "2d", "1d12h").
func ParseWhen(s string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	d, err := ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a time (RFC 3339 or 2006-01-02) nor a duration (1h, 2d)", s)
	}
	return now.Add(-d), nil
}

// ParseDuration is time.ParseDuration that also takes days: "2d", "1d12h".
func ParseDuration(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad duration %q", s)
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return days + d, nil
}
