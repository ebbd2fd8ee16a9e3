//go:build !race

package hostsim_test

const raceEnabled = false
