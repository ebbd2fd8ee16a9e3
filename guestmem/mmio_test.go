//go:build amd64 || arm64 || riscv64 || ppc64le || loong64 || mips64le || mipsle || 386 || arm || wasm

package guestmem

import (
	"bytes"
	"testing"
)

// TestMMIOAccessorsTouchOnlyTheirRegister: each write changes exactly the
// bytes of its register, little-endian, and each read returns them.
func TestMMIOAccessorsTouchOnlyTheirRegister(t *testing.T) {
	m := anon(t, 4096)
	defer m.Unmap()
	v := m.View()
	fill := func() { copy(v.Bytes()[:16], bytes.Repeat([]byte{0xee}, 16)) }
	for _, c := range []struct {
		name  string
		write func()
		off   int
		want  []byte
		read  func() uint64
		value uint64
	}{
		{"8", func() { v.MMIOWrite8(5, 0x12) }, 5, []byte{0x12}, func() uint64 { return uint64(v.MMIORead8(5)) }, 0x12},
		{"16", func() { v.MMIOWrite16(6, 0x3412) }, 6, []byte{0x12, 0x34}, func() uint64 { return uint64(v.MMIORead16(6)) }, 0x3412},
		{"32", func() { v.MMIOWrite32(8, 0x78563412) }, 8, []byte{0x12, 0x34, 0x56, 0x78}, func() uint64 { return uint64(v.MMIORead32(8)) }, 0x78563412},
	} {
		fill()
		c.write()
		want := bytes.Repeat([]byte{0xee}, 16)
		copy(want[c.off:], c.want)
		if got := v.Bytes()[:16]; !bytes.Equal(got, want) {
			t.Errorf("%s-bit write: memory % x, want % x", c.name, got, want)
		}
		if got := c.read(); got != c.value {
			t.Errorf("%s-bit read %#x, want %#x", c.name, got, c.value)
		}
	}
}

func TestMMIOAccessorsRefuseBadOffsets(t *testing.T) {
	m := anon(t, 4096)
	defer m.Unmap()
	v, err := m.View().Sub(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"unaligned 16": func() { v.MMIORead16(1) },
		"unaligned 32": func() { v.MMIOWrite32(2, 0) },
		"past the end": func() { v.MMIORead32(62) },
		"wrapping":     func() { v.MMIOWrite8(^uint64(0), 0) },
		"8 at the end": func() { v.MMIORead8(64) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	v.MMIOWrite8(63, 1) // the last byte is in range
}
