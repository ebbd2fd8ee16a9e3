//go:build linux

package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// nsDir is where named network namespaces are bind-mounted, the same place
// iproute2 uses, so `ip netns` can inspect a live bed.
const nsDir = "/run/netns"

// DefaultPrefix is the namespace-name prefix used when Options.Prefix is empty.
const DefaultPrefix = "netlab"

const maxPrefixLen = 32

// validatePrefix keeps prefixes usable as a single path element under nsDir
// and parseable back out of a namespace name.
func validatePrefix(p string) error {
	if p == "" || len(p) > maxPrefixLen {
		return fmt.Errorf("netlab: prefix %q must be 1..%d characters", p, maxPrefixLen)
	}
	for _, c := range p {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("netlab: prefix %q: only letters, digits, '_', '.', '-' are allowed", p)
		}
	}
	if p[0] == '.' {
		return fmt.Errorf("netlab: prefix %q must not start with '.'", p)
	}
	return nil
}

// newNonce returns 8 random hex digits; with the creator's pid in the name it
// keeps parallel test processes and leftovers of crashed runs apart.
func newNonce() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("netlab: random name suffix: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// nsName is "<prefix>-<pid>-<nonce>-<host>". The pid lets Cleanup tell a
// leftover of a dead process from a live bed of a running one.
func nsName(prefix string, pid int, nonce, host string) string {
	return prefix + "-" + strconv.Itoa(pid) + "-" + nonce + "-" + host
}

// parseNSName returns the creator pid encoded in a name made by nsName with
// this prefix; ok is false for any other name.
func parseNSName(prefix, name string) (pid int, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"-")
	if !found {
		return 0, false
	}
	pidStr, rest, found := strings.Cut(rest, "-")
	if !found {
		return 0, false
	}
	nonce, host, found := strings.Cut(rest, "-")
	if !found || len(nonce) != 8 || host == "" {
		return 0, false
	}
	if _, err := hex.DecodeString(nonce); err != nil {
		return 0, false
	}
	// Canonical decimal only (Atoi alone would take "+1"), so a name maps
	// to exactly one pid string that nsName could have produced.
	if len(pidStr) == 0 || len(pidStr) > 10 || pidStr[0] == '0' {
		return 0, false
	}
	for _, c := range pidStr {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(pidStr)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
