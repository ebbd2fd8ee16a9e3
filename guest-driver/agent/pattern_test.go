package agent

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vstellar/vstellar/virtio/abi"
)

func TestPatternDigestMatchesBytes(t *testing.T) {
	for _, n := range []uint64{0, 1, 7, 8, 9, 4095, 64 << 10, 64<<10 + 8, 200<<10 + 3} {
		b := make([]byte, n)
		Pattern(b, 77)
		if got, want := PatternSHA256(77, n), SHA256(b); got != want {
			t.Errorf("%d bytes: PatternSHA256 %s, bytes hash to %s", n, got, want)
		}
	}
	// Prefixes agree: a pattern of n bytes starts with that of m < n.
	a, b := make([]byte, 100), make([]byte, 13)
	Pattern(a, 5)
	Pattern(b, 5)
	if string(a[:13]) != string(b) {
		t.Error("a shorter pattern is not a prefix of a longer one")
	}
	Pattern(b, 6)
	if string(a[:13]) == string(b) {
		t.Error("seeds 5 and 6 give the same bytes")
	}
}

func TestWireErrorCarriesStatus(t *testing.T) {
	dev := fmt.Errorf("guestdriver: REG_MR: %w", &abi.StatusError{Op: abi.OpRegMR, Status: abi.StatusBadAddress})
	e := remoteError("a", "RegMRAt", wireError(dev).Error())
	if !errors.Is(e, abi.StatusBadAddress) || e.Msg != dev.Error() || e.Guest != "a" {
		t.Fatalf("%#v", e)
	}
	plain := remoteError("", "Fill", wireError(errors.New("buffer range [x] [device status 12]x")).Error())
	if plain.Status != abi.StatusOK || errors.Unwrap(plain) != nil {
		t.Fatalf("a message that only looks like a status: %#v", plain)
	}
	if wireError(nil) != nil {
		t.Fatal("nil error")
	}
}
