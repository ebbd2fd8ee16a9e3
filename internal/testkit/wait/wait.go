// Package wait polls a condition in a test until it holds.
package wait

import (
	"testing"
	"time"
)

// Timeout is how long For waits. It is a bound on a hang, not a
// measurement: generous enough for the slowest condition (a device
// activated through a simulated VM) under -race on a loaded 2-core
// machine, so that a test fails only when the condition never comes.
const Timeout = 20 * time.Second

// pollInterval is the pause between two checks.
const pollInterval = time.Millisecond

// For calls cond until it returns true and fails t ("timed out waiting
// for what") if it has not within Timeout. It must be called from the
// test's goroutine.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Timeout, what, cond)
}

// Within is For with a bound of its own, for a wait whose length is
// part of what the test checks.
func Within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(pollInterval) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%v)", what, d)
		}
	}
}
