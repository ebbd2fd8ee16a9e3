// Package hostsim is a simulated vStellar host: an in-process vstellard
// device manager (the real daemon package, serving real vhost-user
// sockets) with simulated VMs attached to its devices (package vmsim: memfd
// guest RAM, QEMU's vhost-user sequence, a virtio driver), each opened by
// the guest verbs library. The demo and the benchmarks run on it; so can
// tests that want a whole host without a VMM.
//
// Every device of one Host shares the daemon's in-process fabric, so QPs
// of two VMs on the host can talk, and its pinned-memory pool. A VM's
// device pins guest memory as VMOptions.Pin says (on demand by default;
// "all" is the VFIO baseline that pins the whole guest at SET_MEM_TABLE).
//
// AddVM is CreateDevice (the management API) then Boot (vmsim.New, DRIVER_OK,
// the guest driver's probe, each step timed in VM.Boot), so that a
// benchmark can time a boot without the device's creation. RemoveVM
// closes one VM and destroys its device, freeing its memory before the
// host closes.
//
// Hosts that talk across a network: NewPair makes two (two namespaces
// and a veth, or loopback without root), NewCluster one per host of a
// leaf-spine fabric (internal/netlab.LeafSpine; needs root). Either
// way host i is an in-process daemon with a cross-host fabric listening
// in its namespace, owns the GID prefix fec0:0:i+1:i+1::/64, knows every
// other host as a peer, and all share a cluster secret made for them;
// Close stops the hosts before it tears the network down.
package hostsim
