// Package automanager keeps automatically placed jobs placed: it places the
// replica jobs of bundles (and any job with autoPlacement) when they are
// created, re-places an instance that failed or whose node was lost
// (exponential backoff, excluding the nodes it failed on, hot spares first),
// ends a job that keeps failing with MarkJobFailed once it reaches the
// restart ceiling, waits for a lost holder's lease to expire before starting
// a lease-protected job elsewhere, rolls changed bundle templates one
// replica at a time, and finishes bundle deletions, stop times and lease
// expiries.
//
// It runs inside the primary Manager member (it moves with leadership) and
// reaches the Manager only through API, the slice of the client API that
// *norsk.Manager (the Go SDK) implements, so it can equally run out of
// process. It keeps no state of its own that matters: every decision is
// derived from the store as the API shows it — instances, job history (the
// failures within the restart window, the last failure's time and node),
// bundles and leases — so a new primary, or a restarted one, picks up
// exactly where the last one stopped.
//
// The decisions are made by Plan, a pure function of a View and the time,
// so they are tested without a Manager; Run feeds it from the API, woken by
// the event stream and by the earliest time a decision falls due.
package automanager
