package hostile

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio/abi"
)

// Exhaustion: connections, messages, payload bytes and descriptors in
// bulk. Each costs the attacker's device only, and everything it took is
// given back when the attacker leaves (the health check counts).

func TestExhaustion(t *testing.T) {
	runCases(t, exhaustionCases)
}

var exhaustionCases = []hostileCase{
	{"connections queued behind an active one", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		const n = 32
		conns := make([]net.Conn, 0, n)
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range n {
			c, err := net.Dial("unix", e.d.socket(victim))
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			conns = append(conns, c)
		}
		// Every extra connection is refused (closed), not left waiting
		// its turn 500 ms at a time.
		start := time.Now()
		deadline := start.Add(4 * time.Second)
		var wg sync.WaitGroup
		open := make(chan int, n)
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.SetReadDeadline(deadline)
				var b [1]byte
				if _, err := c.Read(b[:]); isTimeout(err) {
					open <- i
				}
			}()
		}
		wg.Wait()
		close(open)
		if len(open) > 0 {
			t.Errorf("%d of %d queued connections still open after %v", len(open), n, time.Since(start).Round(time.Millisecond))
		}
		wantAlive(t, f)
	}},
	{"connect and disconnect cycles", func(t *testing.T, e *env) {
		for range 40 {
			s := newSession(t, e.d.socket(victim))
			s.mustCommand(abi.OpResetState, nil)
			s.close()
		}
	}},
	{"thousands of messages", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		msg := append(header(reqSetVringNum, flagV1, 8), vringState(0, 64)...)
		batch := make([]byte, 0, 100*len(msg))
		for range 100 {
			batch = append(batch, msg...)
		}
		for range 100 { // 10000 messages
			if err := f.sendRaw(batch); err != nil {
				t.Fatal(err)
			}
		}
		syncReplies(t, f)
		wantAlive(t, f)
	}},
	{"maximal payloads", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		big := make([]byte, 4096)
		for range 2000 {
			if err := f.send(99, flagV1, big); err != nil {
				t.Fatal(err)
			}
		}
		syncReplies(t, f)
		wantAlive(t, f)
		// One byte more is the end of the connection.
		f.send(99, flagV1, make([]byte, 4097))
		if !f.hungUp(5 * time.Second) {
			t.Error("a 4097-byte payload was accepted")
		}
	}},
	{"descriptor flood", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		fds := make([]int, 8)
		for i := range fds {
			fds[i] = newEventFD(t)
		}
		for i := range 2000 {
			// Descriptors on requests that take none, and a new call
			// eventfd over the last one: all must be closed.
			if err := f.send(reqSetVringNum, flagV1, vringState(0, 64), fds...); err != nil {
				t.Fatal(err)
			}
			if err := f.send(reqSetVringCall, flagV1, u64(uint64(i%numQueues)), fds[0]); err != nil {
				t.Fatal(err)
			}
		}
		syncReplies(t, f)
		wantAlive(t, f)
	}},
	{"memory tables replaced in a loop", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		ram := newGuestRAM(t, 8<<20)
		for i := range 500 {
			r := region{0, 8 << 20, userAddrBase + uint64(i%2)<<30, 0}
			f.mustAsk(reqSetMemTable, memTable(r), ram.fd)
		}
		wantAlive(t, f)
	}},
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
