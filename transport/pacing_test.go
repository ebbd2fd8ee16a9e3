package transport_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// pacedCC is a fixed window that asks for a gap of gap plus perByte per
// byte after every data packet.
type pacedCC struct {
	win          int
	gap, perByte int64
}

func (p *pacedCC) Window() int                    { return p.win }
func (*pacedCC) OnAck(int64, uint16, int, int64)  {}
func (*pacedCC) OnLoss(int64, uint16, int64)      {}
func (*pacedCC) OnTimeout(int64)                  {}
func (p *pacedCC) PacingGap(_ int64, n int) int64 { return p.gap + p.perByte*int64(n) }
func newPacedConn(t *testing.T, cc transport.CongestionControl) *transport.Conn {
	t.Helper()
	c, err := transport.NewConn(transport.Config{Tenant: 7, MaxPayload: 1024, LocalConn: 1, LocalToken: 1, RemoteConn: 2,
		RemoteToken: 2, CC: cc}, discard{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(transport.Message{Op: wire.OpWrite, Len: 64 << 10, Src: bytesSrc(make([]byte, 64<<10)), RKey: 0x1234}); err != nil {
		t.Fatal(err)
	}
	return c
}

// sendAt transmits at now and reports how many packets went.
func sendAt(c *transport.Conn, now int64) int {
	buf := make([]byte, 2048)
	n := 0
	for {
		if _, _, ok := c.Transmit(now, buf); !ok {
			return n
		}
		n++
	}
}

// TestPacingSpacesPackets: with a pacer asking for a gap, one packet
// leaves per gap, Timeout reports exactly when the next may, and the
// driver that follows Timeout sends each packet on time.
func TestPacingSpacesPackets(t *testing.T) {
	const gap = int64(10 * time.Microsecond)
	c := newPacedConn(t, &pacedCC{win: 64, gap: gap})
	if n := sendAt(c, 0); n != 1 {
		t.Fatalf("%d packets at 0, want 1", n)
	}
	want := gap
	for i := range 20 {
		at, ok := c.Timeout()
		if !ok || at != want {
			t.Fatalf("packet %d: timeout %d %v, want the pacing slot %d", i+1, at, ok, want)
		}
		if n := sendAt(c, at-1); n != 0 {
			t.Fatalf("packet %d: %d sent before its slot", i+1, n)
		}
		c.HandleTimeout(at)
		if n := sendAt(c, at); n != 1 {
			t.Fatalf("packet %d: %d sent at its slot, want 1", i+1, n)
		}
		want = at + gap
	}
	if st := c.Stats(); st.DataSent != 21 {
		t.Fatalf("%d sent, want 21", st.DataSent)
	}
}

// TestPacingCredit: a send later than its slot keeps at most half a gap
// of credit; the gap follows the packet's size.
func TestPacingCredit(t *testing.T) {
	const gap, perByte = int64(10 * time.Microsecond), int64(2)
	c := newPacedConn(t, &pacedCC{win: 64, gap: gap, perByte: perByte})
	buf := make([]byte, 2048)
	pkt, _, ok := c.Transmit(0, buf)
	if !ok {
		t.Fatal("nothing sent")
	}
	g := gap + perByte*int64(len(pkt)) // a full packet's gap
	sendAt(c, 0)
	// The driver comes back three gaps late: one packet goes, and the
	// next slot is half a gap sooner than a full gap after it.
	late := 3 * g
	c.HandleTimeout(late)
	if n := sendAt(c, late); n != 1 {
		t.Fatalf("%d sent late, want 1", n)
	}
	if at, ok := c.Timeout(); !ok || at != late-g/2+g {
		t.Fatalf("timeout %d, want %d (half a gap of credit)", at, late-g/2+g)
	}
}

// TestPacingWindowFirst: when the window, not the pacer, holds packets
// back, Timeout is not a pacing deadline (a driver following it would
// spin): it is the retransmission timer.
func TestPacingWindowFirst(t *testing.T) {
	const gap = int64(time.Microsecond)
	c := newPacedConn(t, &pacedCC{win: 2, gap: gap})
	sendAt(c, 0)
	at, _ := c.Timeout()
	c.HandleTimeout(at)
	if n := sendAt(c, at); n != 1 {
		t.Fatalf("%d sent in the second slot, want 1", n)
	}
	now := at + 5*gap
	c.HandleTimeout(now)
	if n := sendAt(c, now); n != 0 {
		t.Fatalf("%d sent beyond the window", n)
	}
	if at, ok := c.Timeout(); !ok || at != int64(time.Millisecond) {
		t.Fatalf("timeout %d %v, want the RTO at 1 ms", at, ok)
	}
}

// departures records when an endpoint sent each data packet.
type departures struct {
	*endpoint
	p     wire.Packet
	times []int64
}

func (d *departures) Transmit(now int64, buf []byte) ([]byte, uint16, bool) {
	pkt, path, ok := d.endpoint.Transmit(now, buf)
	if ok && wire.Parse(pkt, &d.p) == nil && d.p.Type == wire.TypeData {
		d.times = append(d.times, now)
	}
	return pkt, path, ok
}

// TestPacingOverSim: paced connections over a lossy, reordering
// simulated link complete everything (nothing stalls waiting for a
// pacing slot) and never send data faster than the pacer allows: at
// least half a gap between packets, a gap and a half between every
// other (half a gap of credit at most).
func TestPacingOverSim(t *testing.T) {
	const gap = int64(3 * time.Microsecond)
	for seed := range uint64(4) {
		a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, CC: &pacedCC{win: 32, gap: gap}})
		a.posts, b.posts = 60, 60
		da, db := &departures{endpoint: a.ep}, &departures{endpoint: b.ep}
		link := func() *netsim.Link {
			return &netsim.Link{Delay: 5 * time.Microsecond, Rate: 10e9, Loss: 0.02, Reorder: 0.05, ReorderDelay: 20 * time.Microsecond}
		}
		sim := netsim.New(seed, da, db, link(), link())
		run(t, sim, a, b, allOps, 20000, 10*time.Second, nil)
		for i, d := range []*departures{da, db} {
			if d.endpoint.c.Stats().Retransmits == 0 && seed == 0 && i == 0 {
				t.Logf("seed %d side %d: no retransmission", seed, i)
			}
			for k := 1; k < len(d.times); k++ {
				if d.times[k]-d.times[k-1] < gap/2 {
					t.Fatalf("seed %d side %d: packets %d and %d %d ns apart, gap %d", seed, i, k-1, k, d.times[k]-d.times[k-1], gap)
				}
				if k >= 2 && d.times[k]-d.times[k-2] < gap+gap/2 {
					t.Fatalf("seed %d side %d: packets %d..%d within %d ns", seed, i, k-2, k, d.times[k]-d.times[k-2])
				}
			}
			if len(d.times) < 60 {
				t.Fatalf("seed %d side %d: %d data packets", seed, i, len(d.times))
			}
		}
	}
}

// pathLog is a PathSelector that sprays by psn and remembers where each
// packet last went, and counts the losses and timeouts it hears of.
type pathLog struct {
	rng      *rand.Rand
	last     map[uint32]uint16
	losses   int
	timeouts int
}

func (p *pathLog) SelectPath(_ int64, psn uint32, _ bool) uint16 {
	path := uint16(p.rng.IntN(6))
	p.last[psn] = path
	return path
}
func (*pathLog) OnAck(int64, uint16, int64) {}
func (p *pathLog) OnLoss(int64, uint16)     { p.losses++ }
func (p *pathLog) OnTimeout(int64)          { p.timeouts++ }

// ccLog records what the connection tells its CC.
type ccLog struct {
	acked        map[uint16]int // packets credited per path
	samples      int
	zeroAckCalls int
	losses       int
	badLoss      int // a loss reported with a send time after now
	lossPaths    map[uint16]int
	timeouts     int
}

func (*ccLog) Window() int { return 64 }
func (l *ccLog) OnAck(_ int64, path uint16, acked int, rtt int64) {
	l.acked[path] += acked
	if rtt > 0 {
		l.samples++
	}
	if acked == 0 {
		l.zeroAckCalls++
	}
}
func (l *ccLog) OnLoss(now int64, path uint16, sentAt int64) {
	l.losses++
	l.lossPaths[path]++
	if sentAt > now {
		l.badLoss++
	}
}
func (l *ccLog) OnTimeout(int64) { l.timeouts++ }

// TestCCHearsPaths: the CC is credited, per path, exactly the packets
// whose last transmission went on that path; it gets at most one RTT
// sample per acknowledgement; it hears of every loss the connection
// declares (not by timeout) with the packet's path and send time. The
// path selector hears of the same timeouts, and of every loss, timeouts'
// included.
func TestCCHearsPaths(t *testing.T) {
	for seed := range uint64(3) {
		log := &ccLog{acked: map[uint16]int{}, lossPaths: map[uint16]int{}}
		sel := &pathLog{rng: rand.New(rand.NewPCG(seed, 3)), last: map[uint32]uint16{}}
		a, b := newPair(t, transport.Config{Tenant: 7, MaxPayload: 1024, CC: log, Path: sel})
		a.posts = 100
		sim := netsim.New(seed, a.ep, b.ep,
			&netsim.Link{Delay: 5 * time.Microsecond, Rate: 10e9, Loss: 0.03, Reorder: 0.1, ReorderDelay: 30 * time.Microsecond,
				PathDelay: func(p uint16) time.Duration { return time.Duration(p) * time.Microsecond }},
			&netsim.Link{Delay: 5 * time.Microsecond, Rate: 10e9})
		run(t, sim, a, b, []wire.Op{wire.OpWrite}, 20000, 10*time.Second, nil)
		want := map[uint16]int{}
		for _, path := range sel.last {
			want[path]++
		}
		for path := range uint16(6) {
			if log.acked[path] != want[path] {
				t.Errorf("seed %d path %d: credited %d packets, %d last went there", seed, path, log.acked[path], want[path])
			}
		}
		st := a.ep.c.Stats()
		if log.samples == 0 || uint64(log.samples) > st.AcksReceived {
			t.Errorf("seed %d: %d RTT samples for %d acknowledgements", seed, log.samples, st.AcksReceived)
		}
		if uint64(log.losses) != st.FastRetransmits || log.losses == 0 || log.badLoss != 0 {
			t.Errorf("seed %d: CC heard %d losses (%d with a future send time), connection declared %d", seed, log.losses, log.badLoss, st.FastRetransmits)
		}
		if uint64(log.timeouts) != st.Timeouts || sel.timeouts != log.timeouts {
			t.Errorf("seed %d: %d timeouts, the CC heard %d, the selector %d", seed, st.Timeouts, log.timeouts, sel.timeouts)
		}
		if uint64(sel.losses) < st.FastRetransmits || st.Timeouts == 0 && uint64(sel.losses) != st.FastRetransmits {
			t.Errorf("seed %d: the selector heard %d losses, the connection declared %d fast and had %d timeouts", seed, sel.losses, st.FastRetransmits, st.Timeouts)
		}
		t.Logf("seed %d: %d samples, %d sample-only calls, losses by path %v, %+v", seed, log.samples, log.zeroAckCalls, log.lossPaths, st)
	}
}
