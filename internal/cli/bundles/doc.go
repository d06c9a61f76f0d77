// Package bundles is norsk-ctl's bundle group: create (optionally waiting for
// its replicas to run), update, list, show, delete, start and stop a replica's
// job, the stop time and the lease.
package bundles
