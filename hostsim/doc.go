// Package hostsim is a simulated vStellar host: an in-process vstellard
// device manager (the real daemon package, serving real vhost-user
// sockets) with simulated VMs attached to its devices (package vmm: memfd
// guest RAM, QEMU's vhost-user sequence, a virtio driver), each opened by
// the guest verbs library. The demo and the benchmarks run on it; so can
// tests that want a whole host without a VMM.
//
// Every device of one Host shares the daemon's in-process fabric, so QPs
// of two VMs on the host can talk.
package hostsim
