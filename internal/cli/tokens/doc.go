// Package tokens is norsk-ctl's token group: create, list and revoke API
// tokens.
package tokens
