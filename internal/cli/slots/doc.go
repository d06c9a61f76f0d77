// Package slots is norsk-ctl's slot group: register this machine's server as
// a cluster slot, list, deregister and set a slot's pool.
package slots
