//go:build race

package main

// raceEnabled: the race detector's runtime maps shadow memory of its
// own, which mapping counts must allow for.
const raceEnabled = true
