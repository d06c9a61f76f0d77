// Package store is norsk-ctl's store group (schema versions, boot report,
// backups) and operator group (snapshots: save one from the Manager, inspect
// a file without one).
package store
