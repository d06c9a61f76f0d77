// Package nodes is norsk-ctl's node group (list, get, create on a provider,
// tag, terminate, drain, image prefetch, idle expiry), the providers' catalogue
// commands (instance-types, security-groups, reload-config) and the Cloud
// Hypervisor and mock-host programs norsk-ctl runs (host-agent, ch-vmm,
// ch-initramfs).
package nodes
