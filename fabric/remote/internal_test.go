package remote

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/vstellar/vstellar/fabric"
)

// streamNop is a StreamResponder that refuses everything.
type streamNop struct{}

func (streamNop) Respond(*fabric.Request) fabric.Outcome { return fabric.OutcomeUnreachable }
func (streamNop) TryEnter() bool                         { return true }
func (streamNop) Enter()                                 {}
func (streamNop) Exit()                                  {}
func (streamNop) Begin(*fabric.Request) (fabric.Incoming, fabric.Outcome) {
	return nil, fabric.OutcomeUnreachable
}

// TestIDCollision: two QP pairs whose derived ids collide cannot both be
// connected; the second Connect fails with ErrIDInUse and changes
// nothing.
func TestIDCollision(t *testing.T) {
	orig := identity
	identity = func([]byte, uint32, fabric.Addr, fabric.Addr, uint32) (uint32, uint64) { return 42, 7 }
	defer func() { identity = orig }()
	f, err := New(t.Context(), Config{
		Listen:    netip.MustParseAddrPort("127.0.0.1:0"),
		GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"),
		Peers:     []Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: netip.MustParseAddrPort("127.0.0.1:9")}},
		Secret:    make([]byte, 16),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	go f.Run(context.Background())
	g := netip.MustParseAddr("fd00:0:0:1::1").As16()
	if _, err := f.Register(g, streamNop{}); err != nil {
		t.Fatal(err)
	}
	r := netip.MustParseAddr("fd00:0:0:2::1").As16()
	c := fabric.Connection{Local: fabric.Addr{GID: g, QPN: 1}, Remote: fabric.Addr{GID: r, QPN: 1}, Tenant: 1}
	if err := f.Connect(c); err != nil {
		t.Fatal(err)
	}
	c.Local.QPN = 2
	if err := f.Connect(c); !errors.Is(err, ErrIDInUse) {
		t.Fatalf("colliding Connect: %v", err)
	}
	if n := f.Stats().Connections; n != 1 {
		t.Fatalf("%d connections", n)
	}
}

// TestIdentityDirections: the ids and tokens of the two directions
// differ, and each depends on every input; the token also on the
// stream's first PSN, the id not.
func TestIdentityDirections(t *testing.T) {
	s := []byte("0123456789abcdef")
	a := fabric.Addr{GID: netip.MustParseAddr("fd00::1").As16(), QPN: 1}
	b := fabric.Addr{GID: netip.MustParseAddr("fd00::2").As16(), QPN: 2}
	id, tok := ConnIdentity(s, 1, a, b, 100)
	seenID, seenTok := map[uint64]string{}, map[uint64]string{}
	for name, v := range map[string][2]uint64{
		"base":     {uint64(id), tok},
		"reversed": pack(ConnIdentity(s, 1, b, a, 100)),
		"tenant":   pack(ConnIdentity(s, 2, a, b, 100)),
		"qpn":      pack(ConnIdentity(s, 1, fabric.Addr{GID: a.GID, QPN: 3}, b, 100)),
		"secret":   pack(ConnIdentity([]byte("0123456789abcdeF"), 1, a, b, 100)),
		"psn":      pack(ConnIdentity(s, 1, a, b, 101)),
	} {
		if other, dup := seenTok[v[1]]; dup {
			t.Fatalf("%s and %s give the same token", name, other)
		}
		seenTok[v[1]] = name
		if name == "psn" {
			if uint32(v[0]) != id {
				t.Fatal("the id depends on the PSN")
			}
			continue
		}
		if other, dup := seenID[v[0]]; dup {
			t.Fatalf("%s and %s give the same id", name, other)
		}
		seenID[v[0]] = name
	}
	if id2, tok2 := ConnIdentity(s, 1, a, b, 100); id2 != id || tok2 != tok {
		t.Fatal("not deterministic")
	}
}

func pack(id uint32, tok uint64) [2]uint64 { return [2]uint64{uint64(id), tok} }
