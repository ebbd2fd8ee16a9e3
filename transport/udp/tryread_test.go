package udp_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/udp"
)

// TestTryReadBatch: TryReadBatch returns 0 at once when nothing has
// arrived, even with a read deadline in the past (how a loop is woken),
// then what has arrived, in order, allocating nothing; after Close it
// fails with net.ErrClosed.
func TestTryReadBatch(t *testing.T) {
	for _, mode := range offloadModes {
		for _, paths := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/paths=%d", mode.name, paths), func(t *testing.T) {
				cfg := udp.Config{Addr: lo4, Paths: paths, DisableGSO: mode.off, DisableGRO: mode.off}
				p := newPair(t, cfg, 8, 1200)
				if err := p.b.SetReadDeadline(time.Unix(1, 0)); err != nil {
					t.Fatal(err)
				}
				if n, err := p.b.TryReadBatch(p.in); n != 0 || err != nil {
					t.Fatalf("TryReadBatch with nothing sent = %d, %v", n, err)
				}
				read := func() {
					if n, err := p.a.WriteBatch(p.out); n != len(p.out) || err != nil {
						t.Fatalf("WriteBatch = %d, %v", n, err)
					}
					deadline := time.Now().Add(5 * time.Second)
					for got := 0; got < len(p.out); {
						n, err := p.b.TryReadBatch(p.in)
						if err != nil {
							t.Fatalf("TryReadBatch after %d: %v", got, err)
						}
						got += n
						if time.Now().After(deadline) {
							t.Fatalf("%d of %d datagrams read", got, len(p.out))
						}
					}
				}
				read()
				if avg := testing.AllocsPerRun(50, read); avg != 0 {
					t.Fatalf("%.2f allocations per batch, want 0", avg)
				}
				p.b.Close()
				if _, err := p.b.TryReadBatch(p.in); !errors.Is(err, net.ErrClosed) {
					t.Fatalf("TryReadBatch after Close: %v", err)
				}
			})
		}
	}
}
