// Package audit is norsk-ctl's audit group: read the audit log, append to it,
// prune it and verify its hash chain.
package audit
