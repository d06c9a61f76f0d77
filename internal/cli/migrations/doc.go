// Package migrations is norsk-ctl's migrate command (move a job's instance to
// another node, following the saga's phases) and its migration group (list,
// inspect, abort, forget).
package migrations
