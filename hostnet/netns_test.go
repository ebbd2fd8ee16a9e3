package hostnet_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// needRoot skips (outside CI) or fails (CI=true, which runs as root)
// when the test cannot build network namespaces.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("network namespaces need root, and CI=true runs as root")
		}
		t.Skip("network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)")
	}
}

// testNS is a fresh anonymous network namespace and a netlink handle
// into it. Nothing is named or mounted: when the test ends the handle
// and the namespace's fd close, and the kernel frees the namespace with
// every link in it.
func testNS(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	needRoot(t)
	var ns netns.NsHandle
	if err := onThread(func() error {
		var err error
		ns, err = netns.New() // unshares this (locked) thread into it
		return err
	}); err != nil {
		t.Fatalf("new namespace: %v", err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(func() {
		h.Close()
		ns.Close()
	})
	return ns, h
}

// inNS runs fn on a thread in ns (sockets it opens stay there).
func inNS(ns netns.NsHandle, fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter namespace: %w", err)
		}
		return fn()
	})
}

// onThread runs fn on a locked thread of its own and moves the thread
// back to its namespace afterwards; a thread that cannot go back is
// never unlocked, so the runtime ends it instead of reusing it.
func onThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == os.Getpid() {
			// The main thread cannot be ended: keep it here and use
			// another.
			done <- onThread(fn)
			runtime.UnlockOSThread()
			return
		}
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			done <- fmt.Errorf("back to the original namespace: %w", err)
			return // still locked: the runtime ends the thread
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// veth adds a veth pair a, b in h's namespace, with MTU mtu and a's
// hardware address hw.
func veth(t *testing.T, h *netlink.Handle, a, b string, mtu int, hw net.HardwareAddr) (netlink.Link, netlink.Link) {
	t.Helper()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a, MTU: mtu, HardwareAddr: hw}, PeerName: b}); err != nil {
		t.Fatalf("veth %s/%s: %v", a, b, err)
	}
	la, err := h.LinkByName(a)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := h.LinkByName(b)
	if err != nil {
		t.Fatal(err)
	}
	return la, lb
}

// addAddr adds prefix to l; nodad skips IPv6 duplicate address detection
// (the address is usable at once).
func addAddr(t *testing.T, h *netlink.Handle, l netlink.Link, prefix string, nodad bool) {
	t.Helper()
	p := netip.MustParsePrefix(prefix)
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if nodad {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(l, a); err != nil {
		t.Fatalf("address %s on %s: %v", prefix, l.Attrs().Name, err)
	}
}

func setUp(t *testing.T, h *netlink.Handle, l netlink.Link, up bool) {
	t.Helper()
	f := h.LinkSetDown
	if up {
		f = h.LinkSetUp
	}
	if err := f(l); err != nil {
		t.Fatalf("%s up=%v: %v", l.Attrs().Name, up, err)
	}
}
