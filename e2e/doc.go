// Package e2e holds end-to-end tests: vstellard runs as a separate
// process, exactly as an operator starts it, and simulated VMs (package
// vmsim: memfd RAM, QEMU's vhost-user message order, a guest virtio driver)
// drive its devices through their sockets.
package e2e
