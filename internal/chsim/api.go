// Package chsim is test equipment: a local virtual machine monitor that
// serves Cloud Hypervisor's REST API on a Unix API socket exactly as
// `cloud-hypervisor --api-socket path=…` does (the request and response
// bodies of its OpenAPI description, its status codes and its error
// bodies), so that the host agent (internal/hostagent) is driven through
// the same client it drives the real VMM with and cannot tell them apart.
//
// It holds one VM, as one cloud-hypervisor process does. Its "VM" boots
// the worker the way the worker image's first boot does: from the raw
// first-boot disk (the VM's second disk: providers.UserData, padded with
// NULs to whole sectors), through a cloudsim.Runner — an agent in this
// process, a host process, or a Docker container. Shutting the VM down
// stops the worker and removes what it ran, as powering a machine off
// would.
//
// Program form: `norsk-ctl ch-vmm --api-socket path=<socket>` (and
// `norsk-manager ch-vmm`), one process per VM, spawned by the host agent
// in place of the cloud-hypervisor binary on a machine without KVM.
package chsim
