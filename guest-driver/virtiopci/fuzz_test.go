//go:build linux

package virtiopci

import "testing"

// FuzzParseLayout: config space is bytes a device gives; the parser must
// never panic, and what it accepts must be usable: every structure it
// returns names a real BAR and does not wrap, and the required ones are
// long enough.
func FuzzParseLayout(f *testing.F) {
	f.Add(realConfig(f))
	f.Add(synthetic(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseLayout(b)
		if err != nil {
			return
		}
		ws := []Window{l.Common, l.Notify, l.ISR, l.DeviceCfg}
		for _, r := range l.Shm {
			ws = append(ws, r.Window)
		}
		for _, w := range ws {
			if w.BAR > 5 || w.Offset+w.Length < w.Offset {
				t.Fatalf("accepted %v", w)
			}
		}
		if l.Common.Length < commonCfgLen || l.Notify.Length < 2 || l.ISR.Length < 1 || l.DeviceCfg.Length < 1 {
			t.Fatalf("accepted short structures %+v", l)
		}
		seen := map[uint8]bool{}
		for _, r := range l.Shm {
			if seen[r.ID] {
				t.Fatalf("shmid %d twice", r.ID)
			}
			seen[r.ID] = true
		}
	})
}
