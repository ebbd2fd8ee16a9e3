// Package hosttest starts the simulated host (internal/sim/hostsim)
// that tests of the daemon, the guest driver and the tools begin with.
package hosttest

import (
	"context"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// Start starts a host with o and returns it with a context for the
// test's steps, which ends after timeout or with the test. The host is
// closed when the test ends.
func Start(t testing.TB, timeout time.Duration, o hostsim.Options) (context.Context, *hostsim.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	h, err := hostsim.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return ctx, h
}
