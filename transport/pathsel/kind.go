package pathsel

import (
	"fmt"
	"strings"
)

// Kind is a path-selection policy.
type Kind uint8

const (
	// Single sends every packet on one entropy (Config.Entropy), as
	// RoCE's ECMP hashing puts a connection on one path: the baseline.
	Single Kind = iota
	// OPS sprays each decision on an entropy drawn uniformly at random
	// (oblivious packet spraying).
	OPS
	// RR sprays in round-robin order over the entropies.
	RR
	// DWRR is deficit weighted round robin, each entropy weighted by its
	// smoothed RTT against the minimum and by its recent losses.
	DWRR
	// BestRTT sends on the entropy with the lowest smoothed RTT,
	// exploring a random one every Config.Explore decisions.
	BestRTT
	// P2C is UCCL's power of two choices: of two random entropies, the
	// one with the lower EWMA RTT.
	P2C
	// REPS recycles entropies whose packets were acknowledged without
	// sign of congestion, and draws fresh random ones otherwise
	// (Bonato et al., "Recycled Entropy Packet Spraying").
	REPS
	numKinds
)

var kindNames = [numKinds]string{"single", "ops", "rr", "dwrr", "bestrtt", "p2c", "reps"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Kinds lists every kind, the baseline first.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// ParseKind parses a kind's name (as String gives it, in any case).
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("pathsel: unknown path selector %q (want one of %s): %w", s, strings.Join(kindNames[:], ", "), ErrConfig)
}
