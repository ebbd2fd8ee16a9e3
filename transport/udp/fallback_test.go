package udp_test

import (
	"bytes"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vstellar/vstellar/transport/udp"
)

// inNetns runs fn on a thread switched into a fresh network namespace
// whose loopback is up with the given MTU. Sockets opened by fn stay in
// that namespace after it returns. Needs root.
func inNetns(t *testing.T, mtu int, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		needCapability(t, "not root: cannot create a network namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	defer ns.Close()
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // the thread must not go back to the pool in the wrong namespace
		}
	}()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMTU(lo, mtu); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	fn()
}

// TestGSOFallback: when the kernel refuses a segmented send (here: the
// segment is larger than the path MTU, EINVAL), the datagrams go out again
// one by one and arrive whole; GSO stays on for later sends that fit.
func TestGSOFallback(t *testing.T) {
	var a, b *udp.Conn
	inNetns(t, 1500, func() {
		a = listen(t, udp.Config{Addr: lo4})
		b = listen(t, udp.Config{Addr: lo4})
	})
	needOffload(t, a)
	const big = 2000 // > 1500 - 28: IP fragments when sent alone
	var msgs []udp.Message
	for i := range 4 {
		msgs = append(msgs, udp.Message{Buf: payload(big, 0, i), N: big, Addr: b.LocalAddr(0)})
	}
	send(t, a, msgs)
	got := receive(t, b, len(msgs), 4000, 8)
	for i, d := range got {
		if !bytes.Equal(d.data, payload(big, 0, i)) {
			t.Fatalf("datagram %d: %d bytes, wrong", i, len(d.data))
		}
	}
	st := a.Stats()
	if st.GSOFallbacks != 1 || st.GSOSends != 0 {
		t.Fatalf("Stats %+v: want one fallback and no segmented send", st)
	}
	if !a.Offload().GSO {
		t.Fatal("GSO turned off by an MTU refusal")
	}
	// Datagrams that fit the MTU still go segmented.
	msgs = msgs[:0]
	for i := range 4 {
		msgs = append(msgs, udp.Message{Buf: payload(1000, 0, i), N: 1000, Addr: b.LocalAddr(0)})
	}
	send(t, a, msgs)
	receive(t, b, len(msgs), 4000, 8)
	if st := a.Stats(); st.GSOSends != 1 || st.GSODatagrams != 4 {
		t.Fatalf("Stats %+v: want one segmented send of 4", st)
	}
}
