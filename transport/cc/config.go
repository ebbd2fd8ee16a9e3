package cc

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/vstellar/vstellar/transport"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("cc: bad configuration")

// Kind names a controller.
type Kind uint8

const (
	// KindFixed is transport.FixedWindow: MaxWindow packets, always.
	KindFixed Kind = iota
	// KindSwift is delay-based Swift.
	KindSwift
	// KindCubic is loss-based CUBIC (RFC 9438).
	KindCubic
)

var kindNames = [...]string{KindFixed: "fixed", KindSwift: "swift", KindCubic: "cubic"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind parses "fixed", "swift" or "cubic" (any case, surrounding
// space ignored).
func ParseKind(s string) (Kind, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for k, name := range kindNames {
		if t == name {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("cc: unknown kind %q (want fixed, swift or cubic): %w", s, ErrConfig)
}

// DelayMode is the delay Swift compares with its target.
type DelayMode uint8

const (
	// DelayQuantile (the default) is a quantile (Quantile, the median by
	// default) of the RTT samples of the last RTT: robust when packets
	// are sprayed over paths of which a few are slow (MSwift).
	DelayQuantile DelayMode = iota
	// DelayLatest is plain Swift: the latest sample.
	DelayLatest
)

func (m DelayMode) String() string {
	switch m {
	case DelayQuantile:
		return "quantile"
	case DelayLatest:
		return "latest"
	}
	return fmt.Sprintf("DelayMode(%d)", uint8(m))
}

// Config configures a controller. Zero fields take the defaults; windows
// are in packets.
type Config struct {
	Kind Kind
	// PerPath keeps one controller per path (UCCL's CubicPP) and answers
	// Window with the sum of their windows over the paths heard of in
	// the last PathIdle. Swift and CUBIC only.
	PerPath bool
	// MaxWindow bounds Window. Default (and most) 256, the transport's
	// window; KindFixed allows exactly this much.
	MaxWindow int
	// InitCwnd, MinCwnd and MaxCwnd bound the controller's window (each
	// path's with PerPath). Defaults: Swift 16 (per path 1), 0.01,
	// MaxWindow; CUBIC 10 (per path 1), 1, MaxWindow. MinCwnd may be
	// below one packet (from 0.001): the connection is then paced.
	InitCwnd, MinCwnd, MaxCwnd float64
	// PacingGain: 0 paces only a window below one packet (one packet per
	// RTT/cwnd, as Swift does); g > 0 paces always, at g*cwnd per RTT.
	PacingGain float64

	Swift SwiftConfig
	Cubic CubicConfig

	// Paths is how many path states PerPath keeps (path p uses state
	// p % Paths). Default 256, the paths a sprayer uses.
	Paths int
	// PathIdle: with PerPath, a path heard of (an ack or a loss) no later
	// than this ago counts in the window. Default 1 ms.
	PathIdle time.Duration
}

// SwiftConfig configures Swift (Kumar et al., SIGCOMM 2020). The target
// delay is BaseTarget + Hops*HopScale + a flow-scaling term from 0 (at
// FSMaxCwnd and above) to FSRange (at FSMinCwnd and below).
type SwiftConfig struct {
	// BaseTarget: default 50 µs (UCCL's; tune to the fabric's RTT at the
	// knee of throughput).
	BaseTarget time.Duration
	// Hops on the path (the paper derives them from the TTL; our wire
	// has none) and the target added per hop (default BaseTarget/6.55,
	// htsim's).
	Hops     int
	HopScale time.Duration
	// FSRange: default 5*BaseTarget; negative turns flow scaling off.
	FSRange time.Duration
	// FSMinCwnd, FSMaxCwnd: defaults 0.1 and 100 packets (the paper's).
	FSMinCwnd, FSMaxCwnd float64
	// AI is the additive increase per RTT (packets; default 1).
	AI float64
	// Beta scales the multiplicative decrease (default 0.8); MaxMDF
	// bounds it (default 0.5).
	Beta, MaxMDF float64
	// RetxReset: after this many consecutive timeouts the window drops
	// to MinCwnd (default 5).
	RetxReset int
	// Delay is the delay statistic (default DelayQuantile).
	Delay DelayMode
	// Quantile (DelayQuantile; default 0.5) of the last RTT's samples:
	// the latest window's worth (at least 32, at most Samples: default
	// 64, at most 1024) of those taken within two mean RTTs (and always
	// the latest).
	Quantile float64
	Samples  int
}

// CubicConfig configures CUBIC (RFC 9438).
type CubicConfig struct {
	// C (default 0.4, packets/s³) and Beta (default 0.7).
	C, Beta float64
	// NoFastConvergence turns fast convergence off.
	NoFastConvergence bool
}

// Most samples the quantile window keeps.
const maxSamples = 1024

// New builds the controller cfg describes.
func New(cfg Config) (transport.CongestionControl, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Kind == KindFixed {
		return transport.NewFixedWindow(cfg.MaxWindow), nil
	}
	if cfg.PerPath {
		return newPerPath(cfg), nil
	}
	return newController(cfg), nil
}

// newController builds one Swift or CUBIC controller of a checked cfg.
func newController(cfg Config) controller {
	if cfg.Kind == KindSwift {
		return newSwift(cfg)
	}
	return newCubic(cfg)
}

// withDefaults fills zero fields and validates.
func (c Config) withDefaults() (Config, error) {
	if c.Kind > KindCubic {
		return c, fmt.Errorf("cc: %v: %w", c.Kind, ErrConfig)
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = 256
	}
	if c.MaxWindow < 1 || c.MaxWindow > 256 {
		return c, fmt.Errorf("cc: max window %d outside 1..256: %w", c.MaxWindow, ErrConfig)
	}
	if c.Kind == KindFixed {
		if c.PerPath {
			return c, fmt.Errorf("cc: per-path state needs swift or cubic, not fixed: %w", ErrConfig)
		}
		return c, nil
	}
	initW, lo := 16.0, 0.01
	if c.Kind == KindCubic {
		initW, lo = 10, 1
	}
	if c.PerPath {
		initW = 1
	}
	c.InitCwnd = orF(c.InitCwnd, initW)
	c.MinCwnd = orF(c.MinCwnd, lo)
	c.MaxCwnd = orF(c.MaxCwnd, float64(c.MaxWindow))
	if c.Paths == 0 {
		c.Paths = 256
	}
	if c.PathIdle == 0 {
		c.PathIdle = time.Millisecond
	}
	switch {
	case !(c.MinCwnd >= 0.001) || !(c.MinCwnd <= c.MaxCwnd) || c.MaxCwnd > 1e6:
		return c, fmt.Errorf("cc: window bounds [%g, %g] not within [0.001, 1e6]: %w", c.MinCwnd, c.MaxCwnd, ErrConfig)
	case !(c.InitCwnd >= c.MinCwnd && c.InitCwnd <= c.MaxCwnd):
		return c, fmt.Errorf("cc: initial window %g outside [%g, %g]: %w", c.InitCwnd, c.MinCwnd, c.MaxCwnd, ErrConfig)
	case !(c.PacingGain >= 0 && c.PacingGain <= 1000):
		return c, fmt.Errorf("cc: pacing gain %g outside [0, 1000]: %w", c.PacingGain, ErrConfig)
	case c.Paths < 1 || c.Paths > 1<<16:
		return c, fmt.Errorf("cc: %d paths outside 1..65536: %w", c.Paths, ErrConfig)
	case c.PathIdle < 0:
		return c, fmt.Errorf("cc: path idle time %v negative: %w", c.PathIdle, ErrConfig)
	}
	var err error
	if c.Kind == KindSwift {
		c.Swift, err = c.Swift.withDefaults()
	} else {
		c.Cubic, err = c.Cubic.withDefaults()
	}
	return c, err
}

func (s SwiftConfig) withDefaults() (SwiftConfig, error) {
	if s.BaseTarget == 0 {
		s.BaseTarget = 50 * time.Microsecond
	}
	if s.HopScale == 0 {
		s.HopScale = time.Duration(float64(s.BaseTarget) / 6.55)
	}
	if s.FSRange == 0 {
		s.FSRange = 5 * s.BaseTarget
	}
	s.FSMinCwnd = orF(s.FSMinCwnd, 0.1)
	s.FSMaxCwnd = orF(s.FSMaxCwnd, 100)
	s.AI = orF(s.AI, 1)
	s.Beta = orF(s.Beta, 0.8)
	s.MaxMDF = orF(s.MaxMDF, 0.5)
	if s.RetxReset == 0 {
		s.RetxReset = 5
	}
	s.Quantile = orF(s.Quantile, 0.5)
	if s.Samples == 0 {
		s.Samples = 64
	}
	switch {
	case s.BaseTarget < 0 || s.HopScale < 0 || s.Hops < 0 || s.Hops > 255:
		return s, fmt.Errorf("cc: swift target %v + %d hops * %v: %w", s.BaseTarget, s.Hops, s.HopScale, ErrConfig)
	case !(s.FSMinCwnd > 0 && s.FSMinCwnd < s.FSMaxCwnd) || math.IsInf(s.FSMaxCwnd, 0):
		return s, fmt.Errorf("cc: swift flow scaling cwnd range [%g, %g]: %w", s.FSMinCwnd, s.FSMaxCwnd, ErrConfig)
	case !(s.AI > 0 && s.AI <= 1000):
		return s, fmt.Errorf("cc: swift additive increase %g outside (0, 1000]: %w", s.AI, ErrConfig)
	case !(s.Beta > 0 && s.Beta <= 1):
		return s, fmt.Errorf("cc: swift beta %g outside (0, 1]: %w", s.Beta, ErrConfig)
	case !(s.MaxMDF > 0 && s.MaxMDF < 1):
		return s, fmt.Errorf("cc: swift max decrease factor %g outside (0, 1): %w", s.MaxMDF, ErrConfig)
	case s.RetxReset < 1:
		return s, fmt.Errorf("cc: swift retransmit reset threshold %d: %w", s.RetxReset, ErrConfig)
	case s.Delay > DelayLatest:
		return s, fmt.Errorf("cc: swift %v: %w", s.Delay, ErrConfig)
	case !(s.Quantile > 0 && s.Quantile <= 1):
		return s, fmt.Errorf("cc: swift delay quantile %g outside (0, 1]: %w", s.Quantile, ErrConfig)
	case s.Samples < 1 || s.Samples > maxSamples:
		return s, fmt.Errorf("cc: swift %d delay samples outside 1..%d: %w", s.Samples, maxSamples, ErrConfig)
	}
	return s, nil
}

func (c CubicConfig) withDefaults() (CubicConfig, error) {
	c.C = orF(c.C, 0.4)
	c.Beta = orF(c.Beta, 0.7)
	switch {
	case !(c.C > 0 && c.C <= 1e6):
		return c, fmt.Errorf("cc: cubic C %g outside (0, 1e6]: %w", c.C, ErrConfig)
	case !(c.Beta > 0 && c.Beta < 1):
		return c, fmt.Errorf("cc: cubic beta %g outside (0, 1): %w", c.Beta, ErrConfig)
	}
	return c, nil
}

// orF is v, or def if v is zero.
func orF(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}
