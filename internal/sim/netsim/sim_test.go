package netsim_test

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/netsim"
)

// blaster sends n packets of size bytes, one per Transmit, and counts
// what it receives.
type blaster struct {
	n, size  int
	sent     int
	got      int
	gotAt    []int64
	firstTag []byte
}

func (b *blaster) Receive(now int64, pkt []byte) {
	b.got++
	b.gotAt = append(b.gotAt, now)
	if b.firstTag == nil {
		b.firstTag = append([]byte(nil), pkt[:1]...)
	}
}

func (b *blaster) Transmit(now int64, buf []byte) ([]byte, uint16, bool) {
	if b.sent >= b.n {
		return nil, 0, false
	}
	buf[0] = byte(b.sent)
	b.sent++
	return buf[:b.size], uint16(b.sent % 4), true
}
func (b *blaster) Timeout() (int64, bool) { return 0, false }
func (b *blaster) HandleTimeout(int64)    {}

func runBlast(seed uint64, l *netsim.Link, n int) (*netsim.Sim, *blaster) {
	a, b := &blaster{n: n, size: 1000}, &blaster{}
	s := netsim.New(seed, a, b, l, &netsim.Link{})
	s.Run(time.Hour, func() bool { return false })
	return s, b
}

// TestDeterministic: the same seed gives the same run, a different one a
// different run.
func TestDeterministic(t *testing.T) {
	l := func() *netsim.Link {
		return &netsim.Link{Delay: time.Microsecond, Jitter: 3 * time.Microsecond, Loss: 0.1, Dup: 0.05, Reorder: 0.2, ReorderDelay: 5 * time.Microsecond}
	}
	s1, b1 := runBlast(42, l(), 5000)
	s2, b2 := runBlast(42, l(), 5000)
	_, b3 := runBlast(43, l(), 5000)
	if s1.Stats(0) != s2.Stats(0) || b1.got != b2.got || len(b1.gotAt) != len(b2.gotAt) {
		t.Fatalf("same seed, different runs: %+v vs %+v", s1.Stats(0), s2.Stats(0))
	}
	for i := range b1.gotAt {
		if b1.gotAt[i] != b2.gotAt[i] {
			t.Fatalf("arrival %d at %d vs %d", i, b1.gotAt[i], b2.gotAt[i])
		}
	}
	if b3.got == b1.got && len(b3.gotAt) > 0 && b3.gotAt[len(b3.gotAt)-1] == b1.gotAt[len(b1.gotAt)-1] {
		t.Fatal("a different seed gave the same run")
	}
}

// TestImpairments: loss and duplication happen at about their rates, a
// partition drops everything sent in it, and a rate limit spaces packets.
func TestImpairments(t *testing.T) {
	const n = 20000
	s, b := runBlast(1, &netsim.Link{Delay: time.Microsecond, Loss: 0.1, Dup: 0.05}, n)
	st := s.Stats(0)
	if st.Lost < n*8/100 || st.Lost > n*12/100 || st.Duplicated < n*4/100 || st.Duplicated > n*6/100 {
		t.Fatalf("loss %d, dup %d of %d", st.Lost, st.Duplicated, n)
	}
	if uint64(b.got) != st.Delivered {
		t.Fatalf("received %d, delivered %d", b.got, st.Delivered)
	}
	// 1000-byte packets at 8 Mb/s leave one per millisecond; a partition
	// from 10 to 20 ms drops the ten that leave in it.
	s, b = runBlast(1, &netsim.Link{Rate: 8e6, Partitions: []netsim.Window{{From: 10 * time.Millisecond, To: 20 * time.Millisecond}}}, 100)
	if st := s.Stats(0); st.Partitioned != 10 || b.got != 90 {
		t.Fatalf("%+v, got %d", st, b.got)
	}
	// The rate spaces arrivals 1 ms apart.
	s, b = runBlast(1, &netsim.Link{Rate: 8e6}, 50)
	if b.got != 50 || b.gotAt[49]-b.gotAt[0] != 49*int64(time.Millisecond) {
		t.Fatalf("arrivals span %v, want 49 ms", time.Duration(b.gotAt[49]-b.gotAt[0]))
	}
}
