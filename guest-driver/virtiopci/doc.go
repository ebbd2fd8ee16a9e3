// Package virtiopci is a guestdriver.Transport for a real Linux guest: it
// drives the vStellar device as a virtio 1.x modern PCI device (VIRTIO
// 1.2 §4.1) from user space, so the Go verbs library runs unchanged
// inside a VM.
//
// The kernel's virtio_pci claims every virtio function; Open hands the
// device to uio_pci_generic instead (driver_override, unbind,
// drivers_probe), reads the virtio capabilities from the PCI config
// space, maps the BARs they point into through sysfs resource files, and
// initialises the device (reset, features, queues, DRIVER_OK) itself.
// The split rings and every buffer the device is told about live in DMA
// memory: 2 MiB huge pages (a hugetlbfs memfd; Open grows the kernel's
// pool as needed), locked, whose physical addresses come from
// /proc/self/pagemap (so Open needs root). With no IOMMU in the guest a
// physical address is the device's view of guest memory. The split-ring
// logic is package virtio's DriverQueue, the one the simulated VMM uses.
//
// Interrupts: uio_pci_generic gives INTx only (no MSI-X), which the
// transport takes from /dev/uioN and acknowledges through the ISR; every
// waiter also rechecks its ring on a timer, so a lost interrupt costs a
// poll interval, not a hang. Options.Poll does without interrupts.
//
// Files: transport.go (Options, Open, Close), caps.go (config space
// parsing), sysfs.go (finding and binding the device), bar.go, common.go
// (common config registers), init.go (device initialisation), queue.go
// (commands, events, notifications), config.go (config space, doorbells,
// DMA), irq.go, dma.go (allocator), hugepages.go and pagemap.go (where
// DMA memory comes from).
package virtiopci
