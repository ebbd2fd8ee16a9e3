package hostsim_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vstellar/vstellar/hostsim"
)

func TestHostRunsVMsAndCleansUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := h.AddVM(ctx, "hs-a", hostsim.VMOptions{MemSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.AddVM(ctx, "hs-b", hostsim.VMOptions{MemSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if a.Driver.GID() == b.Driver.GID() {
		t.Fatal("two devices share a GID")
	}
	if _, err := a.Driver.QueryDevice(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddVM(ctx, "hs-a", hostsim.VMOptions{MemSize: 64 << 20}); err == nil {
		t.Fatal("a second device with the same name was created")
	}
	devs, err := h.Client().Devices(ctx)
	if err != nil || len(devs) != 2 {
		t.Fatalf("daemon lists %d devices (%v), want 2", len(devs), err)
	}
	dir := h.RunDir()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("run dir %s left behind: %v", dir, err)
	}
}
