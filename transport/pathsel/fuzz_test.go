package pathsel_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport/pathsel"
)

// FuzzSelector feeds a selector of any kind and shape an arbitrary
// sequence of decisions, ACKs (paths out of range, RTTs of any size),
// losses and timeouts, with time going back and forth: it must never panic, always
// choose a path below Paths (Single: its entropy), and keep its count of
// down paths true.
func FuzzSelector(f *testing.F) {
	f.Add([]byte{0, 4, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 16, 2, 3, 0, 1, 0, 2, 1, 1, 0, 2, 1, 1, 0, 2, 1, 1, 0, 0, 0, 0})
	f.Add([]byte{3, 0, 8, 1, 2, 5, 0, 0, 2, 5, 0, 0, 2, 5, 0, 0, 0, 0, 200, 0, 3, 0, 0, 0})
	f.Add([]byte{4, 255, 1, 2, 1, 0, 255, 255, 1, 7, 0, 9, 0, 0, 0, 0, 3, 0, 0, 0})
	f.Add([]byte{5, 1, 1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0})
	f.Add([]byte{6, 8, 3, 1, 1, 3, 0, 10, 1, 4, 0, 250, 2, 3, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 3 {
			return
		}
		cfg := pathsel.Config{Kind: pathsel.Kind(b[0] % 7), Paths: int(b[1]) + 1, Chunk: int(b[2]%16) + 1,
			Seed: uint64(len(b)), DownAfter: int(b[2]>>4) + 1, ProbeInterval: 50 * time.Microsecond}
		cfg.Entropy = uint16(len(b) % cfg.Paths)
		s, err := pathsel.NewSelector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(0)
		psn := uint32(0)
		for b = b[3:]; len(b) >= 4; b = b[4:] {
			arg := binary.LittleEndian.Uint16(b[2:])
			now += int64(int8(b[1])) * 1000
			switch b[0] % 4 {
			case 0, 1:
				retx := b[0]%4 == 1
				if !retx {
					psn++
				}
				p := s.SelectPath(now, psn-uint32(arg%300), retx)
				if int(p) >= cfg.Paths || cfg.Kind == pathsel.Single && p != cfg.Entropy {
					t.Fatalf("%v: path %d of %d", cfg.Kind, p, cfg.Paths)
				}
			case 2:
				s.OnAck(now, arg%300, int64(b[0])<<(b[1]%64))
			case 3:
				if arg%16 == 0 {
					s.OnTimeout(now)
				} else {
					s.OnLoss(now, arg%300)
				}
			}
			down := 0
			for p := range uint16(cfg.Paths) {
				if s.Path(p).Down {
					down++
				}
			}
			if down != s.Down() {
				t.Fatalf("%d paths down, Down says %d", down, s.Down())
			}
		}
	})
}

// FuzzParseKind: any string either parses to a kind whose name it is
// (ignoring case and surrounding space) or fails with ErrConfig.
func FuzzParseKind(f *testing.F) {
	for _, k := range pathsel.Kinds() {
		f.Add(k.String())
	}
	f.Add(" P2C\t")
	f.Add("kind(3)")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := pathsel.ParseKind(s)
		switch {
		case err != nil && !errors.Is(err, pathsel.ErrConfig):
			t.Fatalf("%q: %v", s, err)
		case err == nil && !strings.EqualFold(strings.TrimSpace(s), k.String()):
			t.Fatalf("%q parsed as %v", s, k)
		}
	})
}
