// Package realvm_test runs vStellar devices in real VMs: Debian's QEMU
// 11.1.3 (shared-memory doorbells, the device under a stand-in virtio id)
// and QEMU 10.2.2 built with virtio id 42 named (guest-RAM doorbells),
// each booting Debian's 6.12 kernel under TCG with the guest program
// cmd/vstellar-guest as /init. The guest opens the device with the Go
// verbs library over virtio-pci (uio_pci_generic) and serves the verbs
// agent on its second serial port; the tests drive two such guests
// through agent.Clients against an in-process vstellard (hostsim).
//
// The harness comes from internal/realvm/prepare.sh. Without it the tests
// skip, saying so, except under CI=true, where they fail.
package realvm_test
