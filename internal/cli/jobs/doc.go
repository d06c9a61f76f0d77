// Package jobs is norsk-ctl's job group: create, update, get, list, history,
// start and stop instances (with --wait), complete, fail, delete and why
// (placement explained).
package jobs
