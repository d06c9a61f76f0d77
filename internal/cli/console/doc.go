// Package console is norsk-ctl's mgr group: the users and roles of norsk-mgr,
// the operator console, kept in the Manager's KV store.
package console
