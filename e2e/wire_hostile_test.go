package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/transport/wire"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The hostile-wire suite: two vstellard processes on loopback, each with
// a cross-host fabric, serve two VMs each: tenant 5's a (host 1) and b
// (host 2), tenant 6's c (host 1) and d (host 2), each pair joined by an
// RC QP. Host 1 reaches host 2 through a relay of the test's (its --peer
// names the relay), which forwards every datagram and keeps a copy: the
// attacker's sniffer. The attacker is a plain UDP socket that sends to
// host 2's fabric port. After each attack both daemons live, both QP
// pairs still move data correctly, b's canary (memory no genuine traffic
// writes, at the attacker's favourite rkey and address) is unchanged,
// and host 2's counters show the drops.

const (
	wireTenantA, wireTenantB = 5, 6
	wireSecret               = "hostile-wire-cluster-key-0123456789"
	// b's memory: genuine WRITEs land in [0, wireGenuine); the canary is
	// [wireCanary, wireCanary+wireCanaryLen).
	wireGenuine   = 256 << 10
	wireCanary    = 1 << 20
	wireCanaryLen = 1 << 20
	wireEvil      = 0xee
)

var (
	wirePrefix1 = netip.MustParsePrefix("fd00:0:0:1::/64")
	wirePrefix2 = netip.MustParsePrefix("fd00:0:0:2::/64")
)

// wireDaemon is one vstellard process with a fabric.
type wireDaemon struct {
	cmd    *exec.Cmd
	runDir string
	logs   *syncBuffer
	exited chan error
	api    *api.Client
	fabric netip.AddrPort
}

// wireFreePort returns a UDP port free on loopback a moment ago.
func wireFreePort(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func wireStartDaemon(t *testing.T, name string, listen netip.AddrPort, prefix netip.Prefix, secret string, peer string) *wireDaemon {
	t.Helper()
	bin, err := buildDaemon()
	if err != nil {
		t.Fatalf("building vstellard: %v", err)
	}
	runDir, err := os.MkdirTemp("", "vswire-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	d := &wireDaemon{runDir: runDir, logs: &syncBuffer{}, exited: make(chan error, 1), fabric: listen,
		api: api.NewClient(filepath.Join(runDir, "vstellard.sock"))}
	d.cmd = exec.Command(bin, "--run-dir", runDir, "--log-level", "info",
		"--fabric-listen", listen.String(), "--gid-prefix", prefix.String(), "--fabric-secret-file", secret, "--peer", peer)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.api.Close()
		d.cmd.Process.Kill()
		<-d.exited
		if t.Failed() {
			t.Logf("%s vstellard logs:\n%s", name, d.logs.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.api.Health(ctx)
		cancel()
		if err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s vstellard not ready: %v\n%s", name, err, d.logs.String())
		}
	}
}

// vm creates a device of tenant on d and boots a VM on it.
func (d *wireDaemon) vm(t *testing.T, ctx context.Context, name string, tenant uint32) *xend {
	t.Helper()
	if _, err := d.api.CreateDevice(ctx, api.DeviceSpec{Name: name, Tenant: tenant}); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	vm, drv := bootVM(t, filepath.Join(d.runDir, name+".sock"), 64<<20)
	return newXend(t, ctx, &hostsim.VM{Name: name, VM: vm, Driver: drv})
}

func (d *wireDaemon) counters(t *testing.T, ctx context.Context) api.FabricCounters {
	t.Helper()
	h, err := d.api.Host(ctx)
	if err != nil {
		t.Fatalf("GET /v1/host: %v", err)
	}
	if h.Fabric == nil {
		t.Fatal("GET /v1/host shows no fabric")
	}
	return h.Fabric.Stats
}

// wireRelay forwards host 1's datagrams to host 2 and keeps a copy of
// each (up to a bound): what an on-path sniffer sees.
type wireRelay struct {
	conn *net.UDPConn
	to   netip.AddrPort
	done chan struct{}

	mu   sync.Mutex
	seen [][]byte
}

const wireRelayKeep = 1 << 14

func wireStartRelay(t *testing.T, to netip.AddrPort) *wireRelay {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	r := &wireRelay{conn: c, to: to, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 1<<16)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return // closed
			}
			c.WriteToUDPAddrPort(buf[:n], to)
			r.mu.Lock()
			if len(r.seen) < wireRelayKeep {
				r.seen = append(r.seen, bytes.Clone(buf[:n]))
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-r.done })
	return r
}

func (r *wireRelay) addr() netip.AddrPort { return r.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// take returns and forgets what the relay captured.
func (r *wireRelay) take() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen
	r.seen = nil
	return s
}

type wireRig struct {
	ctx        context.Context
	h1, h2     *wireDaemon
	relay      *wireRelay
	atk        *net.UDPConn
	a, b, c, d *xend
	canary     []byte // what b's canary must hold
	round      byte
}

func wireSetup(t *testing.T, ctx context.Context) *wireRig {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(secret, []byte(wireSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	l1, l2 := wireFreePort(t), wireFreePort(t)
	r := &wireRig{ctx: ctx}
	r.relay = wireStartRelay(t, l2)
	r.h1 = wireStartDaemon(t, "host 1", l1, wirePrefix1, secret, fmt.Sprintf("%v=%v", wirePrefix2, r.relay.addr()))
	r.h2 = wireStartDaemon(t, "host 2", l2, wirePrefix2, secret, fmt.Sprintf("%v=%v", wirePrefix1, l1))
	var err error
	if r.atk, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0"))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.atk.Close() })

	r.a, r.c = r.h1.vm(t, ctx, "wa", wireTenantA), r.h1.vm(t, ctx, "wc", wireTenantB)
	r.b, r.d = r.h2.vm(t, ctx, "wb", wireTenantA), r.h2.vm(t, ctx, "wd", wireTenantB)
	for _, p := range [][2]*xend{{r.a, r.b}, {r.c, r.d}} {
		p[0].connect(t, ctx, p[1], p[0].qp.DefaultRCConnect(p[1].qp.Endpoint()))
		p[1].connect(t, ctx, p[0], p[1].qp.DefaultRCConnect(p[0].qp.Endpoint()))
	}
	canary := r.b.buf.Bytes()[wireCanary : wireCanary+wireCanaryLen]
	fill(canary, 0x5a)
	r.canary = bytes.Clone(canary)
	return r
}

// addr is e's QP's fabric address.
func (e *xend) addr() fabric.Addr { return fabric.Addr{GID: e.vm.Driver.GID(), QPN: e.qp.Num()} }

// write WRITEs n bytes of a fresh pattern from src to dst's [0, n) and
// checks every byte landed.
func (r *wireRig) write(t *testing.T, what string, src, dst *xend, n int) {
	t.Helper()
	r.round++
	fill(src.buf.Bytes()[:n], r.round)
	wc := src.post(t, guestdriver.SendWR{WRID: uint64(r.round), Opcode: abi.WRRDMAWrite, Signaled: true,
		SGL: []abi.SGE{src.mr.SGE(0, uint32(n))}, RemoteAddr: dst.mr.IOVA(), RKey: dst.mr.RKey()})
	checkWC(t, what, wc, uint64(r.round), abi.WRRDMAWrite, abi.WCSuccess)
	if got, want := dst.buf.Bytes()[:n], src.buf.Bytes()[:n]; !bytes.Equal(got, want) {
		t.Fatalf("%s: WRITE differs at %d", what, firstDiff(got, want))
	}
}

// healthy is every attack's epilogue: both daemons live and answer, both
// QP pairs move data correctly, and no byte of the attacker's reached
// b's canary.
func (r *wireRig) healthy(t *testing.T, what string) {
	t.Helper()
	for i, h := range []*wireDaemon{r.h1, r.h2} {
		select {
		case err := <-h.exited:
			h.exited <- err
			t.Fatalf("%s: host %d vstellard exited: %v", what, i+1, err)
		default:
		}
		if _, err := h.api.Health(r.ctx); err != nil {
			t.Fatalf("%s: host %d API: %v", what, i+1, err)
		}
	}
	r.write(t, what+": a->b", r.a, r.b, wireGenuine)
	r.write(t, what+": d->c", r.d, r.c, 64<<10)
	if got := r.b.buf.Bytes()[wireCanary : wireCanary+wireCanaryLen]; !bytes.Equal(got, r.canary) {
		t.Fatalf("%s: b's canary changed at %d", what, firstDiff(got, r.canary))
	}
}

func (r *wireRig) send(t *testing.T, pkts ...[]byte) {
	t.Helper()
	for _, p := range pkts {
		if _, err := r.atk.WriteToUDPAddrPort(p, r.h2.fabric); err != nil {
			t.Fatalf("attacker send (%d bytes): %v", len(p), err)
		}
	}
}

// settle waits until host 2 has received want more datagrams than in
// before (loopback may drop some under a burst: then it gives up after
// a while and the counters speak for what arrived).
func (r *wireRig) settle(t *testing.T, before api.FabricCounters, want uint64) api.FabricCounters {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		now := r.h2.counters(t, r.ctx)
		if now.Received-before.Received >= want || time.Now().After(deadline) {
			return now
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// evilWrite is a well-formed one-packet WRITE of evil bytes into b's
// canary, with b's real rkey, for conn/token/tenant of the attacker's
// choosing.
func (r *wireRig) evilWrite(tenant, conn uint32, token uint64, psn, msn uint32) []byte {
	payload := bytes.Repeat([]byte{wireEvil}, 1024)
	return wire.AppendData(nil, &wire.Header{Flags: wire.FlagFirst | wire.FlagLast | wire.FlagAckReq, Tenant: tenant, Conn: conn, Token: token, PSN: psn},
		&wire.Data{Op: wire.OpWrite, MSN: msn, MsgLen: uint32(len(payload)), RKey: r.b.mr.RKey(), RAddr: r.b.mr.IOVA() + wireCanary}, payload)
}

// genuine returns the DATA packets of a's stream to b among captured.
func (r *wireRig) genuine(t *testing.T, captured [][]byte) (pkts [][]byte, hdr wire.Header) {
	t.Helper()
	id, _ := remote.ConnIdentity([]byte(wireSecret), wireTenantA, r.a.addr(), r.b.addr(), 0)
	var p wire.Packet
	for _, b := range captured {
		if wire.Parse(b, &p) == nil && p.Type == wire.TypeData && p.Conn == id {
			pkts, hdr = append(pkts, b), p.Header
		}
	}
	if len(pkts) == 0 {
		t.Fatal("the relay captured no DATA packet of a's stream to b")
	}
	return pkts, hdr
}

// TestWireHostilePeer: an attacker on the fabric's UDP port with
// garbage, truncated and oversized datagrams, forged connection ids,
// forged and stale tokens, another tenant's connection, replays of
// sniffed packets and a flood of all of these costs nothing but the
// drops, which host 2 counts.
func TestWireHostilePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two vstellard processes and four VMs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := wireSetup(t, ctx)
	r.healthy(t, "before the attacks")
	sniffed, hdr := r.genuine(t, r.relay.take())
	rng := rand.New(rand.NewPCG(17, 3))
	bID, bToken := hdr.Conn, hdr.Token
	dID, dToken := remote.ConnIdentity([]byte(wireSecret), wireTenantB, r.c.addr(), r.d.addr(), r.c.qp.DefaultRCConnect(r.d.qp.Endpoint()).SQPSN)

	// Each case sends its datagrams and says which counter of host 2
	// must have grown by how many (at least: a case's own packets are
	// all the attacker sends meanwhile, but genuine traffic may add).
	type counted func(d api.FabricCounters) uint64
	malformed := func(d api.FabricCounters) uint64 { return d.Malformed }
	unknown := func(d api.FabricCounters) uint64 { return d.UnknownConn }
	foreign := func(d api.FabricCounters) uint64 { return d.Foreign }
	dups := func(d api.FabricCounters) uint64 { return d.Duplicates }
	cases := []struct {
		name  string
		pkts  func() [][]byte
		count counted
	}{
		{"garbage", func() [][]byte {
			var out [][]byte
			for range 500 {
				b := make([]byte, rng.IntN(2000))
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				out = append(out, b)
			}
			return out
		}, malformed},
		{"truncated", func() [][]byte {
			var out [][]byte
			for n := range len(sniffed[0]) {
				out = append(out, sniffed[0][:n])
			}
			return out
		}, malformed},
		{"bad version and reserved bits", func() [][]byte {
			var out [][]byte
			for _, off := range []int{2, 5, 28, 41} {
				b := bytes.Clone(sniffed[0])
				b[off] ^= 0x40
				out = append(out, b)
			}
			return out
		}, malformed},
		{"oversized", func() [][]byte {
			big := make([]byte, 65507) // the largest IPv4 UDP payload
			copy(big, sniffed[0][:wire.HeaderLen+wire.DataLen])
			// payload_len says 0xffff, the datagram holds less.
			binary.BigEndian.PutUint16(big[wire.HeaderLen+2:], 0xffff)
			junk := make([]byte, 65507)
			return [][]byte{big, junk}
		}, malformed},
		{"forged connection ids", func() [][]byte {
			var out [][]byte
			for range 500 {
				id := rng.Uint32()
				if id == bID || id == dID {
					continue
				}
				out = append(out, r.evilWrite(wireTenantA, id, bToken, hdr.PSN+1, 0))
			}
			return out
		}, unknown},
		{"forged tokens", func() [][]byte {
			var out [][]byte
			for range 500 {
				out = append(out, r.evilWrite(wireTenantA, bID, rng.Uint64(), hdr.PSN+1, 0))
			}
			return out
		}, foreign},
		{"stale tokens", func() [][]byte {
			// The tokens of other incarnations of the a-b pair: the
			// same QPs connected with other PSNs.
			var out [][]byte
			for i := range uint32(64) {
				_, tok := remote.ConnIdentity([]byte(wireSecret), wireTenantA, r.a.addr(), r.b.addr(), hdr.PSN+1000+i*7919)
				out = append(out, r.evilWrite(wireTenantA, bID, tok, hdr.PSN+1, 0))
			}
			return out
		}, foreign},
		{"another tenant", func() [][]byte {
			// b's connection named with tenant 6; d's connection (tenant
			// 6) with tenant 5's header and token, and with its own
			// token under tenant 5; a captured packet re-addressed to d.
			out := [][]byte{
				r.evilWrite(wireTenantB, bID, bToken, hdr.PSN+1, 0),
				r.evilWrite(wireTenantA, dID, bToken, 0, 0),
				r.evilWrite(wireTenantA, dID, dToken, 0, 0),
				r.evilWrite(wireTenantB, dID, bToken, 0, 0),
			}
			for _, s := range sniffed[:min(len(sniffed), 16)] {
				b := bytes.Clone(s)
				binary.BigEndian.PutUint32(b[12:], dID)
				out = append(out, b)
				b = bytes.Clone(s)
				binary.BigEndian.PutUint32(b[8:], wireTenantB)
				out = append(out, b)
			}
			return out
		}, foreign},
		{"another tenant's QP as destination", func() [][]byte {
			// The id a's connection to tenant 6's d would have: no such
			// connection exists.
			id, tok := remote.ConnIdentity([]byte(wireSecret), wireTenantA, r.a.addr(), r.d.addr(), hdr.PSN)
			return [][]byte{r.evilWrite(wireTenantA, id, tok, hdr.PSN, 0)}
		}, unknown},
	}
	for _, c := range cases {
		before := r.h2.counters(t, ctx)
		pkts := c.pkts()
		r.send(t, pkts...)
		after := r.settle(t, before, uint64(len(pkts)))
		got := c.count(after) - c.count(before)
		t.Logf("%s: %d datagrams sent, counter +%d (received +%d)", c.name, len(pkts), got, after.Received-before.Received)
		if got < uint64(len(pkts))*9/10 {
			t.Errorf("%s: %d datagrams sent, the counter grew by %d: %+v", c.name, len(pkts), got, after)
		}
		if after.DataReceived != before.DataReceived || after.BytesPlaced != before.BytesPlaced {
			t.Errorf("%s: host 2 took data from the attacker: %d packets, %d bytes placed", c.name,
				after.DataReceived-before.DataReceived, after.BytesPlaced-before.BytesPlaced)
		}
		r.healthy(t, c.name)
		r.relay.take()
	}

	// Replays: a WRITE's sniffed packets sent again after b's guest
	// wrote its memory anew land nowhere: they are duplicates. The ACKs
	// c sent for d's stream, replayed, are old news to d's connection.
	t.Run("replay", func(t *testing.T) {
		r.write(t, "recorded WRITE", r.a, r.b, wireGenuine)
		r.write(t, "recorded WRITE", r.d, r.c, 64<<10)
		all := r.relay.take()
		recorded, _ := r.genuine(t, all)
		var acks [][]byte
		var p wire.Packet
		for _, b := range all {
			if wire.Parse(b, &p) == nil && p.Type == wire.TypeAck && p.Tenant == wireTenantB {
				acks = append(acks, b)
			}
		}
		fill(r.b.buf.Bytes()[:wireGenuine], 0x77)
		now := bytes.Clone(r.b.buf.Bytes()[:wireGenuine])
		before := r.h2.counters(t, ctx)
		for range 3 {
			r.send(t, recorded...)
			r.send(t, acks...)
		}
		after := r.settle(t, before, uint64(3*(len(recorded)+len(acks))))
		t.Logf("replayed %d ACKs of d's stream three times", len(acks))
		if len(acks) == 0 {
			t.Error("the relay captured no ACK of d's stream")
		}
		t.Logf("replayed %d packets three times: duplicates +%d, data received +%d", len(recorded), after.Duplicates-before.Duplicates, after.DataReceived-before.DataReceived)
		if got := r.b.buf.Bytes()[:wireGenuine]; !bytes.Equal(got, now) {
			t.Fatalf("a replayed WRITE changed b's memory at %d", firstDiff(got, now))
		}
		if d := dups(after) - dups(before); d < uint64(len(recorded)) {
			t.Errorf("%d replayed packets, %d counted as duplicates", 3*len(recorded), d)
		}
		if after.DataReceived != before.DataReceived {
			t.Errorf("replays accepted as new data: %d", after.DataReceived-before.DataReceived)
		}
		r.relay.take()
		r.healthy(t, "replay")
	})

	// A flood of everything above while a genuine transfer runs.
	t.Run("flood", func(t *testing.T) {
		var pkts [][]byte
		for _, c := range cases {
			pkts = append(pkts, c.pkts()...)
		}
		before := r.h2.counters(t, ctx)
		stop := make(chan struct{})
		var sent uint64
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r.atk.WriteToUDPAddrPort(pkts[i%len(pkts)], r.h2.fabric)
				sent++
			}
		})
		start := time.Now()
		for i := range 5 {
			r.write(t, fmt.Sprintf("WRITE %d under the flood", i), r.a, r.b, wireGenuine)
		}
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		took := time.Since(start)
		after := r.h2.counters(t, ctx)
		drops := (after.Malformed + after.UnknownConn + after.Foreign) - (before.Malformed + before.UnknownConn + before.Foreign)
		t.Logf("flood: %d datagrams in %v, host 2 received %d and dropped %d as malformed/unknown/foreign, %d retransmits",
			sent, took.Round(time.Millisecond), after.Received-before.Received, drops, after.Retransmits-before.Retransmits)
		if drops < (after.Received-before.Received)/2 {
			t.Errorf("flood: host 2 received %d datagrams, counted %d drops", after.Received-before.Received, drops)
		}
		r.healthy(t, "flood")
	})
	if s := r.h2.logs.String() + r.h1.logs.String(); bytes.Contains([]byte(s), []byte("panic")) {
		t.Fatal("a daemon logged a panic")
	}
}
