package pathsel

import (
	"errors"
	"fmt"
	"time"
)

// Limits on the configuration.
const (
	// MaxPaths is the most entropies a selector spreads over (the
	// transport keeps at most 256 paths).
	MaxPaths = 256
	// MaxChunk bounds Config.Chunk: beyond a whole send window a chunk
	// means nothing.
	MaxChunk = 4096
	// MaxRecycleBuffer bounds Config.RecycleBuffer.
	MaxRecycleBuffer = 64
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("pathsel: bad configuration")

// Config configures a selector. Zero fields take the defaults; fields
// that do not concern Kind are ignored.
type Config struct {
	// Kind is the policy (default Single).
	Kind Kind
	// Paths is the number of entropies, path indices 0..Paths-1
	// (default 128, 1..MaxPaths).
	Paths int
	// Seed makes every random choice reproducible.
	Seed uint64
	// Entropy is Single's one path (< Paths).
	Entropy uint16
	// Chunk is the number of consecutive new packets sent on one path
	// per decision (default 1, 1..MaxChunk); UCCL's 32 KB chunk is about
	// 8 packets of 4 KiB. Retransmissions and probes are decided alone.
	Chunk int
	// DownAfter: a path with this many losses in a row and no ACK since
	// is down and avoided, except for probes, until an ACK arrives on it
	// (default 3, 1..255). Not for Single.
	DownAfter int
	// ProbeInterval is the wait before a down path's first probe
	// (default 1 ms); every probe left unanswered doubles the wait, up
	// to MaxProbeInterval (default 32 x ProbeInterval): each lost probe
	// costs its connection a recovery, so a dead path is asked ever
	// less often.
	ProbeInterval, MaxProbeInterval time.Duration
	// Explore: BestRTT sends one decision in Explore on a random path,
	// so paths it is not using get measured again (default 16; 1 always
	// explores).
	Explore int
	// RecyclePercent: REPS recycles the entropy of an ACK whose RTT is
	// at most this percentage of the minimum RTT seen (default 150: up
	// to half a base RTT of queueing is no congestion; >= 100).
	RecyclePercent int
	// RecycleBuffer is the number of entropies REPS keeps for reuse
	// (default 8, 1..MaxRecycleBuffer).
	RecycleBuffer int
	// FreezeTime: after a retransmission timeout REPS stops exploring
	// for this long, sending only on the entropies it holds (default
	// 5 ms: a few RTOs of a loaded fabric, long enough for the
	// connection to recover on known-good paths while the dead ones are
	// found; at most 1 s).
	FreezeTime time.Duration
}

// withDefaults fills zero fields and validates.
func (c Config) withDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Paths, 128)
	def(&c.Chunk, 1)
	def(&c.DownAfter, 3)
	def(&c.Explore, 16)
	def(&c.RecyclePercent, 150)
	def(&c.RecycleBuffer, 8)
	if c.ProbeInterval == 0 {
		c.ProbeInterval = time.Millisecond
	}
	if c.MaxProbeInterval == 0 {
		c.MaxProbeInterval = 32 * c.ProbeInterval
	}
	if c.FreezeTime == 0 {
		c.FreezeTime = 5 * time.Millisecond
	}
	switch {
	case c.Kind >= numKinds:
		return c, fmt.Errorf("pathsel: %v: %w", c.Kind, ErrConfig)
	case c.Paths < 1 || c.Paths > MaxPaths:
		return c, fmt.Errorf("pathsel: %d paths outside 1..%d: %w", c.Paths, MaxPaths, ErrConfig)
	case c.Kind == Single && int(c.Entropy) >= c.Paths:
		return c, fmt.Errorf("pathsel: single entropy %d not below %d paths: %w", c.Entropy, c.Paths, ErrConfig)
	case c.Chunk < 1 || c.Chunk > MaxChunk:
		return c, fmt.Errorf("pathsel: chunk of %d packets outside 1..%d: %w", c.Chunk, MaxChunk, ErrConfig)
	case c.DownAfter < 1 || c.DownAfter > 255:
		return c, fmt.Errorf("pathsel: down after %d losses outside 1..255: %w", c.DownAfter, ErrConfig)
	case c.ProbeInterval < 0 || c.MaxProbeInterval < c.ProbeInterval || c.MaxProbeInterval > time.Hour:
		return c, fmt.Errorf("pathsel: probe interval %v up to %v: want 0 < first <= max <= 1h: %w", c.ProbeInterval, c.MaxProbeInterval, ErrConfig)
	case c.Explore < 1:
		return c, fmt.Errorf("pathsel: explore every %d decisions: want >= 1: %w", c.Explore, ErrConfig)
	case c.RecyclePercent < 100 || c.RecyclePercent > 100000:
		return c, fmt.Errorf("pathsel: recycle threshold %d%% of the minimum RTT outside 100..100000: %w", c.RecyclePercent, ErrConfig)
	case c.FreezeTime < 0 || c.FreezeTime > time.Second:
		return c, fmt.Errorf("pathsel: freeze time %v outside 0..1s: %w", c.FreezeTime, ErrConfig)
	case c.RecycleBuffer < 1 || c.RecycleBuffer > MaxRecycleBuffer:
		return c, fmt.Errorf("pathsel: recycle buffer of %d outside 1..%d: %w", c.RecycleBuffer, MaxRecycleBuffer, ErrConfig)
	}
	return c, nil
}
