package cc

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
)

func TestParseKind(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Kind
	}{{"fixed", KindFixed}, {"swift", KindSwift}, {" CUBIC\n", KindCubic}, {"Swift", KindSwift}} {
		k, err := ParseKind(c.in)
		if err != nil || k != c.want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", c.in, k, err, c.want)
		}
	}
	for _, in := range []string{"", "reno", "swift2", "cubicpp"} {
		if _, err := ParseKind(in); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "want fixed, swift or cubic") {
			t.Errorf("ParseKind(%q): %v", in, err)
		}
	}
	if s := Kind(9).String(); s != "Kind(9)" {
		t.Errorf("bad kind prints %q", s)
	}
}

// TestNewKinds: New builds the controller each configuration names,
// with the defaults filled.
func TestNewKinds(t *testing.T) {
	c, err := New(Config{})
	if f, ok := c.(*transport.FixedWindow); err != nil || !ok || f.Window() != 256 {
		t.Fatalf("fixed: %T %v", c, err)
	}
	c, _ = New(Config{MaxWindow: 32})
	if c.Window() != 32 {
		t.Fatalf("fixed window %d, want 32", c.Window())
	}
	c, err = New(Config{Kind: KindSwift})
	if s, ok := c.(*Swift); err != nil || !ok || s.Cwnd() != 16 || s.Target() <= int64(50*time.Microsecond) {
		t.Fatalf("swift: %T %v", c, err)
	}
	c, err = New(Config{Kind: KindCubic})
	if s, ok := c.(*Cubic); err != nil || !ok || s.Cwnd() != 10 || !math.IsInf(s.Ssthresh(), 1) {
		t.Fatalf("cubic: %T %v", c, err)
	}
	c, err = New(Config{Kind: KindCubic, PerPath: true})
	if p, ok := c.(*PerPath); err != nil || !ok || p.Paths() != 256 || p.PathCwnd(7) != 1 {
		t.Fatalf("per-path: %T %v", c, err)
	}
	// Every controller is also a pacer the core will find.
	for _, k := range []Kind{KindSwift, KindCubic} {
		for _, pp := range []bool{false, true} {
			c, _ := New(Config{Kind: k, PerPath: pp})
			if _, ok := c.(transport.Pacer); !ok {
				t.Errorf("%v per-path %v: not a Pacer", k, pp)
			}
		}
	}
}

// TestConfigErrors: each bad field is refused with an error that says
// which, wrapping ErrConfig.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Kind: 3}, "Kind(3)"},
		{Config{MaxWindow: 300}, "max window 300"},
		{Config{MaxWindow: -1}, "max window -1"},
		{Config{PerPath: true}, "per-path state needs swift or cubic"},
		{Config{Kind: KindSwift, MinCwnd: 0.0001}, "window bounds"},
		{Config{Kind: KindSwift, MinCwnd: 5, MaxCwnd: 4, InitCwnd: 4}, "window bounds"},
		{Config{Kind: KindSwift, MinCwnd: math.NaN()}, "window bounds"},
		{Config{Kind: KindCubic, MaxCwnd: math.Inf(1)}, "window bounds"},
		{Config{Kind: KindCubic, InitCwnd: 300}, "initial window 300"},
		{Config{Kind: KindCubic, PacingGain: -1}, "pacing gain"},
		{Config{Kind: KindCubic, Paths: 70000}, "70000 paths"},
		{Config{Kind: KindCubic, PathIdle: -1}, "path idle"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{BaseTarget: -1}}, "swift target"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{Hops: -2}}, "swift target"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{FSMinCwnd: 200}}, "flow scaling"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{AI: -1}}, "additive increase"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{Beta: 1.5}}, "swift beta"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{MaxMDF: 1}}, "max decrease"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{RetxReset: -1}}, "reset threshold"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{Delay: 7}}, "DelayMode(7)"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{Quantile: 1.5}}, "quantile"},
		{Config{Kind: KindSwift, Swift: SwiftConfig{Samples: 5000}}, "5000 delay samples"},
		{Config{Kind: KindCubic, Cubic: CubicConfig{C: -0.4}}, "cubic C"},
		{Config{Kind: KindCubic, Cubic: CubicConfig{Beta: 1}}, "cubic beta"},
	} {
		_, err := New(c.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// FuzzParseKind: ParseKind accepts exactly the three names (any case,
// space around) and what it returns prints as the name.
func FuzzParseKind(f *testing.F) {
	for _, s := range []string{"fixed", "swift", "cubic", " Cubic ", "", "reno", "\x00swift"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKind(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if !strings.EqualFold(strings.TrimSpace(s), k.String()) {
			t.Fatalf("ParseKind(%q) = %v", s, k)
		}
		if k2, err := ParseKind(k.String()); err != nil || k2 != k {
			t.Fatalf("round trip of %v: %v %v", k, k2, err)
		}
	})
}
