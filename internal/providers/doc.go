// Package providers is the seam between the Manager and the sources of
// elastic nodes: clouds (aws, oci) and the mock provider's hosts. It holds
//
//   - Provider, the interface every provider implements (launch a node's
//     instance with a client token, terminate, list by cluster tag, set
//     tags) and Catalog, the optional instance-type facts;
//   - Registry, the providers this member runs, with the overrides file
//     (regions and worker images; Reload applies a new one) and the
//     instance-type cache (TypeCache);
//   - Fleet, the provider side of a primary term: it creates nodes (one
//     raft write records the launch before the cloud is called, so a new
//     primary repeats it with the same client token and never makes a
//     second instance), resumes creates a failed primary left, runs the
//     empty-node reaper and start timeouts, terminates the instances of
//     terminated nodes and reconciles each provider's instances with the
//     node records both ways;
//   - the worker user data format (UserData), which a node's instance boots
//     its worker from.
//
// The Manager reaches Fleet through a small Backend (the store's nodes, one
// write path, the URLs and CA pin workers register with); the providers
// never see the store. Registered local servers (the "cluster" provider)
// are the store's own cluster slots and need nothing here.
//
// Subpackages: mock (nodes booted by mock hosts), aws (EC2 through the AWS
// SDK for Go v2), oci (OCI through its Go SDK). See docs/decisions/0029.
package providers
