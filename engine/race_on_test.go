//go:build race

package engine_test

// raceEnabled: the race detector's runtime has periodic work of its own
// and makes every wake-up dearer, which CPU measurements must allow for.
const raceEnabled = true
