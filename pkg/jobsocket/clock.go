package jobsocket

import "time"

// Handover payloads are the application's own bytes, but an application that
// hands a timed output over (a frame clock, a segment timeline) has to say
// WHEN, and the two instances of a handover may run on different hosts. The
// one clock both can read is the wall clock, synchronized by NTP or PTP; the
// clock each should pace its output by is its own monotonic clock, which no
// wall-clock step moves. These two helpers convert between them at the
// moment a payload is written or read, so a payload carries an instant as
// unix nanoseconds of the wall clock (monotonic-free) and each side paces on
// its monotonic clock. What is exact is then bounded by the skew between the
// two hosts' wall clocks (docs/decisions/0055-frame-exact-cutover.md).

// WallUnixNano expresses the instant t on this host's wall clock as it reads
// at now: unix nanoseconds, for a payload another host will read. t and now
// should both come from time.Now (t possibly moved by Add): the distance
// between them is then taken from the monotonic clock, so an instant
// scheduled before the wall clock was stepped is expressed as the wall
// clock reads now, not as it read when t was taken.
func WallUnixNano(t, now time.Time) int64 {
	return now.Round(0).Add(t.Sub(now)).UnixNano()
}

// LocalTime maps unixNano, an instant on the wall clock (written by
// WallUnixNano, possibly on another host), onto this process's clock as read
// at now (from time.Now). The result carries now's monotonic reading, so
// timers, Sub and Until against it are unaffected by later steps of this
// host's wall clock.
func LocalTime(unixNano int64, now time.Time) time.Time {
	return now.Add(time.Unix(0, unixNano).Sub(now.Round(0)))
}
