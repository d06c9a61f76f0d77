// Package events is norsk-ctl's events command: the Manager's event stream,
// filtered by kind and subject, printed as it happens.
package events
