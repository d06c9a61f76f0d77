// Package discovery is norsk-ctl's discovery group (publish, get, rotate and
// verify node tokens) and access-replica group (publish norsk-mgr's
// role-store replica).
package discovery
