//go:build linux

package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testPrefix names every namespace the tests make; TestMain removes
// leftovers of earlier crashed test runs with it.
const testPrefix = "netlabtest"

// crashEnv makes the test binary act as a process that builds a bed and
// dies without closing it (see TestCleanupRemovesCrashedBed).
const crashEnv = "NETLAB_TEST_CRASH_PREFIX"

func TestMain(m *testing.M) {
	if p := os.Getenv(crashEnv); p != "" {
		crashChild(p)
		return
	}
	if p := os.Getenv(crashFabricEnv); p != "" {
		crashFabricChild(p)
		return
	}
	if Available() == nil {
		for _, sub := range []string{"", "close", "fail", "crash", "bad", "delay", "ls", "lsfail", "lsbad", "lscrash"} {
			if removed, err := Cleanup(testPrefix + sub); err != nil || len(removed) > 0 {
				fmt.Fprintf(os.Stderr, "netlab: removed stale test namespaces %v (err %v)\n", removed, err)
			}
		}
	}
	os.Exit(m.Run())
}

// crashChild builds a bed with every kind of resource, prints its namespace
// names and kills itself so nothing gets to clean up.
func crashChild(prefix string) {
	bed, err := TwoHost(context.Background(), Options{Prefix: prefix, Rate: 50_000_000, Loss: 0.01, Delay: time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	w := bufio.NewWriter(os.Stdout)
	for _, h := range bed.Hosts() {
		fmt.Fprintln(w, h.Namespace())
	}
	w.Flush()
	unix.Kill(os.Getpid(), unix.SIGKILL)
	select {}
}

// requireNetlab skips (outside CI) or fails (CI=true) when beds cannot be
// built here, saying why.
func requireNetlab(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("netlab unavailable under CI=true: %v", err)
		}
		t.Skipf("skipping: network namespaces unavailable (run as root for these tests): %v", err)
	}
}

func newBed(t *testing.T, o Options) *Bed {
	t.Helper()
	requireNetlab(t)
	if o.Prefix == "" {
		o.Prefix = testPrefix
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bed, err := TwoHost(ctx, o)
	if err != nil {
		t.Fatalf("TwoHost: %v", err)
	}
	t.Cleanup(func() {
		if err := bed.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return bed
}

// listenUDP opens a UDP socket inside h on its link address.
func listenUDP(t *testing.T, h *Host, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.Addr(), uint16(port))))
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", h.Name(), err)
	}
	t.Cleanup(func() { c.Close() })
	forceRcvBuf(t, c, 16<<20)
	return c
}

func forceRcvBuf(t *testing.T, c *net.UDPConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("SO_RCVBUFFORCE: %v", serr)
	}
}

func setDF(t *testing.T, c *net.UDPConn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("IP_MTU_DISCOVER: %v", serr)
	}
}

func addrPort(c *net.UDPConn) netip.AddrPort {
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// recvOne reads one datagram or returns an error at the deadline.
func recvOne(c *net.UDPConn, wait time.Duration) ([]byte, netip.AddrPort, error) {
	buf := make([]byte, 65536)
	c.SetReadDeadline(time.Now().Add(wait))
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	return buf[:n], from, nil
}

// expectSilence asserts that nothing arrives on c for wait.
func expectSilence(t *testing.T, c *net.UDPConn, wait time.Duration, why string) {
	t.Helper()
	if b, from, err := recvOne(c, wait); err == nil {
		t.Fatalf("%s: received %d bytes from %v, want nothing", why, len(b), from)
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read: %v", why, err)
	}
}

// warmUp sends until one datagram gets through, so neighbour resolution is
// done before a measurement starts.
func warmUp(t *testing.T, from, to *net.UDPConn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := from.WriteToUDPAddrPort([]byte("warm"), addrPort(to)); err != nil {
			t.Fatalf("warm-up send: %v", err)
		}
		if _, _, err := recvOne(to, 100*time.Millisecond); err == nil {
			drain(to)
			return
		}
	}
	t.Fatalf("warm-up: nothing got through from %v to %v", addrPort(from), addrPort(to))
}

// drain discards whatever is queued on c.
func drain(c *net.UDPConn) {
	buf := make([]byte, 65536)
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
			return
		}
	}
}

// namedWith lists /run/netns entries starting with prefix+"-".
func namedWith(t *testing.T, prefix string) []string {
	t.Helper()
	names, err := listNamed()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix+"-") {
			out = append(out, n)
		}
	}
	return out
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// nsInode identifies a network namespace by the inode of its nsfs file.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}
