package pathsel

import "math/rand/v2"

// rng is the selector's random source: a PCG held by value and called
// directly, so a draw costs a few instructions and never allocates.
type rng struct{ pcg rand.PCG }

func newRNG(seed uint64) rng {
	return rng{pcg: *rand.NewPCG(seed, seed^0xda3e39cb94b95bdb)}
}

func (r *rng) uint64() uint64 { return r.pcg.Uint64() }

// below maps 32 random bits x to [0, n) by multiply-shift (Lemire); the
// bias, n/2^32, is nothing for n <= MaxPaths.
func below(x uint32, n int) int { return int(uint64(x) * uint64(n) >> 32) }

// intn is a random int in [0, n).
func (r *rng) intn(n int) int { return below(uint32(r.uint64()>>32), n) }
