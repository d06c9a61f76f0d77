// Package kv is norsk-ctl's kv group: get, list, put, delete and commit (a
// file of guarded writes) in the Manager's key/value store.
package kv
