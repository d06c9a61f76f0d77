// Package providers holds the node providers: the owners of elastic nodes,
// which the Manager asks to create a node when placement finds nowhere for
// a job and to terminate one the empty-node reaper finds idle. Registered
// local servers (the "cluster" provider) are the store's own cluster slots
// and need no package here.
//
//   - mock: nodes booted by mock hosts (test and development machines that
//     stand in for a cloud's instance API).
package providers
