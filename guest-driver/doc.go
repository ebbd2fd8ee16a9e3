// Package guestdriver is the guest side of the vStellar device: a Go verbs
// library over the device's control queue and doorbell region. This first
// step opens a device (reads and validates config space) and queries it
// (QUERY_DEVICE); PDs, CQs, QPs, MRs and the data path build on the same
// command helper.
//
// The library talks to the device only through a [Transport], the seam
// between the verbs logic and how the guest reaches the device. The first
// transport, [VMTransport], runs the "guest" inside the simulated VMM of
// package vmm (guest memory is the VM's memfd RAM, doorbells are the
// SHMEM_MAP'd pages); a virtio-pci transport for real guests comes later
// and needs no change here.
//
// Invariants:
//   - All bytes that cross to or from the device are encoded and decoded by
//     package abi; this package has no layouts of its own.
//   - Nothing the device returns is trusted blindly: config space is
//     validated before use (ABI major version, limits, doorbell geometry),
//     responses must have exactly the size the ABI defines, and a non-OK
//     status becomes an error wrapping the abi.Status
//     (errors.Is(err, abi.StatusNotSupported)).
package guestdriver
