//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Network sysctls are per namespace, and /proc/sys/net resolves against the
// namespace of the calling thread (not the process, unlike /proc/net), so
// they are read and written from a thread moved into the namespace.

// sysctl is one /proc/sys setting. Optional ones are skipped when the
// kernel does not have them (e.g. IPv6 compiled out); the others must
// exist.
type sysctl struct {
	key      string // dotted, e.g. "net.ipv4.ip_forward"
	value    string
	optional bool
}

func sysctlPath(key string) string {
	return "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

// setSysctls writes settings in order inside the namespace.
func (n *namespace) setSysctls(settings []sysctl) error {
	return onThread(n.enter, func() error {
		for _, s := range settings {
			err := writeSysctl(s.key, s.value)
			if err == nil || s.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("netlab: %s: sysctl %s not in this kernel: %w: %w", n.name, s.key, errors.ErrUnsupported, err)
			}
			return fmt.Errorf("netlab: %s: set %s=%s: %w", n.name, s.key, s.value, err)
		}
		return nil
	})
}

// writeSysctl writes one setting in the calling thread's namespace. The
// file is opened without O_CREAT so a missing key reports ErrNotExist.
func writeSysctl(key, value string) error {
	f, err := os.OpenFile(sysctlPath(key), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	return errors.Join(werr, f.Close())
}

// getSysctl reads one setting inside the namespace, without the trailing
// newline.
func (n *namespace) getSysctl(key string) (string, error) {
	var v string
	err := onThread(n.enter, func() error {
		b, err := os.ReadFile(sysctlPath(key))
		if err != nil {
			return fmt.Errorf("netlab: %s: read %s: %w", n.name, key, err)
		}
		v = strings.TrimSpace(string(b))
		return nil
	})
	return v, err
}
