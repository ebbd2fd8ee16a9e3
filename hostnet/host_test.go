package hostnet

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestDumpRetries: an interrupted dump is retried until it completes,
// up to dumpAttempts; other errors and a canceled context end it at
// once, and partial results are never returned.
func TestDumpRetries(t *testing.T) {
	ctx := context.Background()
	calls := 0
	v, err := dump(ctx, "x", func() ([]int, error) {
		calls++
		if calls < 3 {
			return []int{1}, netlink.ErrDumpInterrupted
		}
		return []int{1, 2}, nil
	})
	if err != nil || len(v) != 2 || calls != 3 {
		t.Fatalf("%v %v after %d calls", v, err, calls)
	}
	calls = 0
	v, err = dump(ctx, "x", func() ([]int, error) { calls++; return []int{1}, netlink.ErrDumpInterrupted })
	if !errors.Is(err, netlink.ErrDumpInterrupted) || v != nil || calls != dumpAttempts {
		t.Fatalf("always interrupted: %v %v after %d calls", v, err, calls)
	}
	calls = 0
	if _, err := dump(ctx, "x", func() ([]int, error) { calls++; return nil, unix.EPERM }); !errors.Is(err, unix.EPERM) || calls != 1 {
		t.Fatalf("EPERM: %v after %d calls", err, calls)
	}
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := dump(c, "x", func() ([]int, error) { t.Fatal("called"); return nil, nil }); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// FuzzValidateName: what it accepts is what the kernel's dev_valid_name
// accepts.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"eth0", "", ".", "..", "a/b", "a:b", "a b", "0123456789abcde", "0123456789abcdef", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kernel := len(s) >= 1 && len(s) <= 15 && s != "." && s != ".." && !strings.ContainsAny(s, "/:\x00 \t\n\v\f\r")
		if err := ValidateName(s); (err == nil) != kernel {
			t.Fatalf("%q: %v, kernel accepts: %v", s, err, kernel)
		}
		if err := ValidateName(s); err != nil && !errors.Is(err, ErrBadName) {
			t.Fatalf("%q: %v", s, err)
		}
	})
}

// FuzzScopeText: every scope writes a text that reads back to it; a
// text that reads is a scope's name or its number.
func FuzzScopeText(f *testing.F) {
	for _, s := range []string{"global", "link", "host", "site", "7", "255", "256", "", "Global"} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, s string, v uint8) {
		b, _ := Scope(v).MarshalText()
		var back Scope
		if err := back.UnmarshalText(b); err != nil || back != Scope(v) {
			t.Fatalf("%d -> %s -> %d, %v", v, b, back, err)
		}
		var sc Scope
		if sc.UnmarshalText([]byte(s)) != nil {
			return
		}
		if n, err := strconv.ParseUint(s, 10, 8); s != scopeNames[sc] && (err != nil || Scope(n) != sc) {
			t.Fatalf("%q read as %d (%v)", s, sc, sc)
		}
	})
}
