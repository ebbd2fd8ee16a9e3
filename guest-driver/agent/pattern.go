package agent

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Pattern fills b with the byte stream of seed: the 8-byte little-endian
// words of splitmix64 seeded with seed; a short tail takes the first
// bytes of the next word. The guest fills with it (Fill), the host
// computes the same bytes' digest (PatternSHA256), so every byte moved
// is checked without moving it through the RPC.
func Pattern(b []byte, seed uint64) {
	x := seed
	for len(b) >= 8 {
		x += gamma
		binary.LittleEndian.PutUint64(b, mix(x))
		b = b[8:]
	}
	if len(b) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(x+gamma))
		copy(b, w[:])
	}
}

// gamma is splitmix64's increment.
const gamma = 0x9e3779b97f4a7c15

// mix is splitmix64's output function.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// PatternSHA256 is the hex SHA-256 of n bytes of Pattern(seed),
// computed in chunks of whole words, each continuing the word stream.
func PatternSHA256(seed, n uint64) string {
	h := sha256.New()
	buf := make([]byte, min(n, 64<<10))
	for words := uint64(0); n > 0; {
		k := min(n, uint64(len(buf)))
		Pattern(buf[:k], seed+words*gamma)
		h.Write(buf[:k])
		words += k / 8
		n -= k
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is the hex SHA-256 of b, as Digest reports it.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
