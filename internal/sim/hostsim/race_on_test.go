//go:build race

package hostsim_test

// raceEnabled: the race detector's runtime has periodic work of its own
// (proportional to the memory it shadows), which idle-CPU measurements
// must allow for.
const raceEnabled = true
