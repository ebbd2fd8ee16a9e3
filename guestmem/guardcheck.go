//go:build !race

package guestmem

// Without the race detector (production builds) the check costs nothing;
// CI runs every test with -race, where guardcheck_race.go enforces it.

func registerChecked(*Mapping)   {}
func unregisterChecked(*Mapping) {}
func (v View) checkGuarded()     {}
