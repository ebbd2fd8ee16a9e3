//go:build linux

// Command vstellar-guest is the guest side of a real VM running the
// vStellar device: the VM's /init (PID 1 of a small initramfs) or an
// ordinary program in a guest that has its own init. It takes the device
// from the kernel with package virtiopci, opens it with the Go verbs
// library, prints what it found and how long the device took to become
// ready, and then (mode agent) serves the verbs agent on a serial port
// for a test on the host, or (mode probe) stops. In mode exec it leaves
// the device to the kernel driver (vstellar.ko), brings the network up
// and runs programs for the host (package guestexec): rdma-core's tools
// and perftest over the kernel driver and libvstellar.
//
// As PID 1 it mounts what the driver needs, loads the kernel modules the
// image lists in /etc/vstellar/modules (else uio and uio_pci_generic), runs
// the work in a child process (so no crash of the work can end PID 1 and
// panic the kernel) and powers the VM off when the child ends. Settings
// come from flags or, as PID 1, from the kernel command line:
//
//	vstellar.mode=agent|probe|exec  what to do (agent)
//	vstellar.devid=N            the virtio device id to accept (42)
//	vstellar.addr=BDF           the PCI address to take (the first match)
//	vstellar.tty=PATH           the agent's serial port (/dev/ttyS1)
//	vstellar.poll=1             poll the rings instead of taking INTx
//	vstellar.handback=1         give the device back to virtio_pci at the end
//	vstellar.wait=1             wait for the device to be hot-plugged, and
//	                            again after it is unplugged
//	vstellar.timeout=DURATION   power off after this long (probe: 2m)
//	vstellar.ip=ADDR/LEN        exec: the first network interface's address
//
// The agent lets the host reboot the guest (an abrupt reboot, no driver
// shutdown) and reset and re-open the device (after a restarted
// vstellard). With vstellar.wait the program waits for a device to be
// hot-plugged, lets it go when the kernel removes it (touching none of
// its registers again) and waits for the next.
//
// Every step prints one line to the console with the time since the
// kernel booted and since the program started.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// childEnv marks the worker process PID 1 starts; it carries PID 1's
// start time (CLOCK_BOOTTIME, ns) so the device-ready time counts from
// the program's start, not the worker's.
const childEnv = "VSTELLAR_GUEST_WORKER"

func main() {
	start := bootTime()
	if os.Getpid() == 1 {
		os.Exit(asInit(start)) // never returns: asInit powers off
	}
	if v := os.Getenv(childEnv); v != "" {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
			start = time.Duration(ns)
		}
		cfg, err := configFromCmdline()
		if err != nil {
			fmt.Fprintf(os.Stderr, "vstellar-guest: %v\n", err)
			os.Exit(2)
		}
		os.Exit(work(cfg, newConsole(os.Stdout, start)))
	}
	cfg, err := configFromFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "vstellar-guest: %v\n", err)
		os.Exit(2)
	}
	os.Exit(work(cfg, newConsole(os.Stdout, start)))
}
