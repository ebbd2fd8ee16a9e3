//go:build linux

package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// config is what the program does.
type config struct {
	mode  string // "agent", "probe" or "exec"
	devID uint16
	addr  string
	tty   string
	poll  bool
	// handBack: on exit, return the device to the kernel's virtio_pci.
	handBack bool
	// wait: wait for the device to be plugged in when there is none, and
	// again after it is unplugged (hot-plug).
	wait    bool
	timeout time.Duration // 0: none
	// ip is the first network interface's address in exec mode
	// ("10.0.0.1/24"); empty leaves the network down.
	ip string
}

func defaults() config {
	return config{mode: "agent", devID: abi.DeviceID, tty: "/dev/ttyS1"}
}

func (c config) check() error {
	if c.mode != "agent" && c.mode != "probe" && c.mode != "exec" {
		return fmt.Errorf("mode %q: want agent, probe or exec", c.mode)
	}
	if c.ip != "" {
		if _, err := netip.ParsePrefix(c.ip); err != nil {
			return fmt.Errorf("address %q: %w", c.ip, err)
		}
	}
	if c.devID == 0 {
		return fmt.Errorf("virtio device id 0")
	}
	return nil
}

func configFromFlags(args []string) (config, error) {
	c := defaults()
	fs := flag.NewFlagSet("vstellar-guest", flag.ContinueOnError)
	fs.StringVar(&c.mode, "mode", c.mode, "agent: serve the verbs agent on -tty; probe: open the device, print, stop; exec: leave the device to the kernel driver and run programs for the host on -tty")
	fs.StringVar(&c.ip, "ip", "", "exec mode: the first network interface's address, as 10.0.0.1/24")
	devID := fs.Uint("devid", uint(c.devID), "virtio device id to accept (a stand-in for 42 under a VMM that cannot name it)")
	fs.StringVar(&c.addr, "addr", "", "PCI address of the device (default: the first that matches)")
	fs.StringVar(&c.tty, "tty", c.tty, "serial port the agent serves")
	fs.BoolVar(&c.poll, "poll", false, "poll the rings instead of taking the INTx interrupt")
	fs.BoolVar(&c.handBack, "handback", false, "on exit, give the device back to the kernel's virtio_pci driver")
	fs.BoolVar(&c.wait, "wait", false, "wait for the device to be hot-plugged, and again after it is unplugged")
	fs.DurationVar(&c.timeout, "timeout", 0, "stop after this long (0: never)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *devID > 0xffff-0x1040 {
		return c, fmt.Errorf("virtio device id %d", *devID)
	}
	c.devID = uint16(*devID)
	return c, c.check()
}

func configFromCmdline() (config, error) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return config{}, err
	}
	return parseCmdline(string(b))
}

// parseCmdline reads the vstellar.* parameters of a kernel command line
// and ignores the rest. Probe mode gets a 2 minute timeout unless one is
// given: a probe that hangs must still power the VM off.
func parseCmdline(s string) (config, error) {
	c := defaults()
	timeoutSet := false
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "vstellar.mode":
			c.mode = v
		case "vstellar.devid":
			var n uint64
			if n, err = strconv.ParseUint(v, 0, 16); err == nil && n > 0xffff-0x1040 {
				err = fmt.Errorf("out of range")
			}
			c.devID = uint16(n)
		case "vstellar.addr":
			c.addr = v
		case "vstellar.tty":
			c.tty = v
		case "vstellar.poll":
			c.poll = on(v)
		case "vstellar.handback":
			c.handBack = on(v)
		case "vstellar.wait":
			c.wait = on(v)
		case "vstellar.ip":
			c.ip = v
		case "vstellar.timeout":
			c.timeout, err = time.ParseDuration(v)
			timeoutSet = true
		}
		if err != nil {
			return c, fmt.Errorf("kernel parameter %s: %w", f, err)
		}
	}
	if c.mode == "probe" && !timeoutSet {
		c.timeout = 2 * time.Minute
	}
	return c, c.check()
}

func on(v string) bool { return v == "1" || v == "true" || v == "on" }
