// Package cmdutil is what every norsk-ctl command shares: the global flags and
// the connection to the Manager (Globals, Ask), argument checks and usage
// errors, the printers -o chooses (table, wide, json, yaml, name,
// go-template), the formatting of times, ports and events for tables, id
// prefix resolution, shell completion, --wait and --watch. It knows no
// command group; the groups (internal/cli/jobs, nodes, …) build on it.
package cmdutil
