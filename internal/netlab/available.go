//go:build linux

package netlab

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	capNetAdmin = 12
	capSysAdmin = 21
)

// Available reports whether this process can build testbeds: it needs
// CAP_NET_ADMIN (links, addresses, qdiscs, BPF filters) and CAP_SYS_ADMIN
// (unshare and bind-mount namespaces), a writable /run/netns, and kernel
// support for network namespaces and veth. It proves the last two by
// building a veth pair in a throwaway anonymous namespace, which the kernel
// frees on return, so the probe leaves nothing behind. A nil error means
// TwoHost should work; otherwise the error says what is missing, so callers
// can fall back to loopback with a clear reason.
func Available() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("netlab: read capabilities: %w", err)
	}
	caps, err := parseCapEff(string(status))
	if err != nil {
		return err
	}
	var missing []string
	if caps&(1<<capNetAdmin) == 0 {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if caps&(1<<capSysAdmin) == 0 {
		missing = append(missing, "CAP_SYS_ADMIN")
	}
	if len(missing) > 0 {
		return fmt.Errorf("netlab: need root or %s (uid %d has effective capabilities %#x)",
			strings.Join(missing, "+"), os.Geteuid(), caps)
	}
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return fmt.Errorf("netlab: %s not writable: %w", nsDir, err)
	}
	if err := unix.Access(nsDir, unix.W_OK); err != nil {
		return fmt.Errorf("netlab: %s not writable: %w", nsDir, err)
	}
	return onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netlab: no network namespace support: unshare(CLONE_NEWNET): %w", err)
		}
		return nil
	}, func() error {
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlab: netlink in new namespace: %w", err)
		}
		defer nl.Close()
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "probe0"
		if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "probe1"}); err != nil {
			return fmt.Errorf("netlab: no veth support: %w", err)
		}
		return nil
	})
}

// parseCapEff extracts the effective capability mask from the text of
// /proc/<pid>/status.
func parseCapEff(status string) (uint64, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if v == "" || len(v) > 16 {
			return 0, fmt.Errorf("netlab: malformed CapEff %q", v)
		}
		caps, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("netlab: malformed CapEff %q: %w", v, err)
		}
		return caps, nil
	}
	return 0, fmt.Errorf("netlab: no CapEff line in process status")
}
