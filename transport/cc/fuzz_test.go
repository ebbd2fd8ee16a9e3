package cc

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzEvents feeds a controller, chosen by the first byte, a sequence of
// acknowledgements, losses, timeouts, undo marks and undos with
// arbitrary times, counts, paths and samples: the windows stay finite
// and within their bounds, Window within [1, MaxWindow], the pacing gap
// within [0, 1 s]; an undo never shrinks the window.
func FuzzEvents(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 2, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 3, 0, 10, 1, 5, 0, 200, 1, 30, 2, 7, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{5, 0, 0, 1, 1, 128, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2})
	// Mark, loss, ack, undo; cubic and per-path swift.
	f.Add([]byte{2, 0, 3, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 10, 0, 1, 0, 0, 0, 1, 5, 3, 1, 4, 0, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{4, 1, 3, 2, 1, 0, 0, 0, 0, 0, 1, 2, 1, 0, 0, 10, 0, 1, 4, 2, 1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		cfg := Config{Kind: KindSwift, Paths: 4, MaxWindow: 64, PacingGain: float64(b[1]%4) / 2}
		switch b[0] % 6 {
		case 1:
			cfg.Swift.Delay = DelayLatest
		case 2:
			cfg.Kind = KindCubic
		case 3:
			cfg.Kind = KindCubic
			cfg.MinCwnd = 0.05
		case 4:
			cfg.PerPath = true
		case 5:
			cfg.Kind, cfg.PerPath = KindCubic, true
		}
		cc, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		full, _ := cfg.withDefaults()
		ctl := cc.(controller)
		now := int64(0)
		for b = b[2:]; len(b) >= 8; b = b[8:] {
			op, path := b[0]%5, uint16(b[1])
			dt := int64(int16(binary.LittleEndian.Uint16(b[2:]))) * 1000 // may go back
			now += dt
			n := int(int8(b[4]))
			rtt := int64(int16(binary.LittleEndian.Uint16(b[5:]))) * int64(b[7]) * 10
			switch op {
			case 0:
				cc.OnAck(now, path, n, rtt)
			case 1:
				cc.OnLoss(now, path, now-rtt)
			case 2:
				cc.OnTimeout(now)
			case 3:
				ctl.MarkUndo(now)
			case 4:
				// (PerPath's sum is added up afresh then: it may drift
				// by rounding.)
				prev := ctl.Cwnd()
				if ctl.Undo(now) && ctl.Cwnd() < prev*(1-1e-9) {
					t.Fatalf("undo shrank the window from %g to %g", prev, ctl.Cwnd())
				}
			}
			w, c := cc.Window(), ctl.Cwnd()
			if w < 1 || w > full.MaxWindow {
				t.Fatalf("window %d outside [1, %d]", w, full.MaxWindow)
			}
			if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
				t.Fatalf("cwnd %g", c)
			}
			if p, ok := cc.(*PerPath); ok {
				for i := range p.paths {
					if pc := p.paths[i].ctl.Cwnd(); !(pc >= full.MinCwnd && pc <= full.MaxCwnd) {
						t.Fatalf("path %d cwnd %g outside [%g, %g]", i, pc, full.MinCwnd, full.MaxCwnd)
					}
				}
			} else if !(c >= full.MinCwnd && c <= full.MaxCwnd) {
				t.Fatalf("cwnd %g outside [%g, %g]", c, full.MinCwnd, full.MaxCwnd)
			}
			for _, srtt := range []int64{0, 1, 50_000, math.MaxInt64} {
				if g := ctl.PacingGap(srtt, 1500); g < 0 || g > maxGap {
					t.Fatalf("gap %d at srtt %d", g, srtt)
				}
			}
		}
	})
}
