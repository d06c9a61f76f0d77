// Package chqemu is a VMM backend that serves Cloud Hypervisor's REST API
// (internal/chapi) on a Unix API socket, as `cloud-hypervisor
// --api-socket path=…` does, but boots a real microVM with QEMU's microvm
// machine under KVM (`qemu-system-x86_64 -M microvm -enable-kvm`). It is
// the smoke-test form of the host agent's VMM on a machine with /dev/kvm
// and no cloud-hypervisor binary: the agent drives it through the same
// client and cannot tell it from the real VMM.
//
// vm.create validates and keeps the VmConfig; vm.boot starts one QEMU
// process (kernel, initramfs and cmdline from the payload; each disk a
// virtio-blk device carrying its serial; the serial port to the configured
// file; a QMP socket beside the API socket); vm.info answers the state
// QEMU reports over QMP (query-status); vm.shutdown and vm.delete end the
// QEMU process (QMP quit), as Cloud Hypervisor's vm.shutdown stops the VM
// without asking its guest.
//
// Networking: a NetConfig with a tap is a tap netdev; without one the VM
// gets QEMU's user-mode network (slirp), where the guest is 10.0.2.15/24
// and reaches the host's loopback at 10.0.2.2. The host reaches the guest
// only through a forwarded port: the VMM forwards a free port on the host's
// 127.0.0.1 to the guest's GuestWorkerPort and appends
// "norsk.hostfwd=127.0.0.1:<port>" to the kernel command line, so the
// guest's init (internal/guestinit) advertises that address to the Manager.
//
// BuildInitramfs writes the guest's initramfs (a newc cpio: the init, the
// worker binary and the kernel modules the microvm machine's devices need)
// from Go, with no external tool.
//
// Program form: `norsk-ctl ch-vmm --backend qemu --api-socket path=<socket>`.
package chqemu
