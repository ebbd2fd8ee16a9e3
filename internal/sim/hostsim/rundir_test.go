package hostsim_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// A daemon started again on a run directory serves a device of the same
// name on the same socket, as a restarted vstellard does; the directory
// is left to the Host that made it.
func TestRestartOnSameRunDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h1, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := h1.RunDir()
	s1, err := h1.CreateDevice(ctx, "rd-a", hostsim.VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h1.Shutdown(); err != nil {
		t.Fatal(err)
	}
	h2, err := hostsim.New(ctx, hostsim.Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := h2.CreateDevice(ctx, "rd-a", hostsim.VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s1 != s2 || h2.RunDir() != dir {
		t.Errorf("after the restart: socket %s in %s, was %s in %s", s2, h2.RunDir(), s1, dir)
	}
	if _, err := h2.AddVM(ctx, "rd-b", hostsim.VMOptions{MemSize: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := h2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the second daemon removed a run dir it did not make: %v", err)
	}
	if err := h1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("run dir %s left after its Host closed: %v", dir, err)
	}
}
