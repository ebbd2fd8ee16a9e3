package vhost_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/internal/testkit/vhosttest"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio"
)

// These tests run the backend against vmsim, the QEMU-exact front-end that
// shares no protocol code with this package: a layout or ordering mistake
// on either side shows up here.

func newVM(t *testing.T, path string, mem uint64, addMemReg bool) *vmsim.VM {
	proto := frontend.SupportedProtocolFeatures // ADD_MEM_REG, as QEMU with CONFIGURE_MEM_SLOTS
	if !addMemReg {
		proto &^= 1 << frontend.ProtoConfigureMemSlots
	}
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vm, err := vmsim.New(ctx, vmsim.Config{
		SocketPath: path, MemSize: mem, NumQueues: 2, QueueSize: 64, ConfigSize: 16, ProtocolFeatures: proto,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

func echo(t *testing.T, vm *vmsim.VM, q int, msg []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := vm.Request(ctx, q, msg, uint32(len(msg)))
	if err != nil {
		t.Fatalf("request on queue %d: %v", q, err)
	}
	return got
}

func TestAgainstVMM(t *testing.T) {
	for _, c := range []struct {
		name      string
		mem       uint64
		addMemReg bool
	}{
		{"set_mem_table", 64 << 20, false},
		{"add_mem_reg", 64 << 20, true},
		{"above_4g_hole", 3 << 30, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := vhost.NewEchoDevice(t)
			b := vhost.NewBackend(dev, vhost.Options{Name: c.name})
			vm := newVM(t, vhosttest.Serve(t, b, "dev"), c.mem, c.addMemReg)
			ctx := context.Background()
			if err := vm.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if got := echo(t, vm, 0, []byte("hello")); string(got) != "hello" {
				t.Fatalf("echo: %q", got)
			}
			if got := echo(t, vm, 1, []byte{1, 2}); !bytes.Equal(got, []byte{0xfe, 0xfd}) {
				t.Fatalf("queue 1: %x", got)
			}
			cfg, err := vm.ReadConfig(ctx)
			if err != nil || len(cfg) != 16 || cfg[0] != 0xa0 {
				t.Fatalf("config %x, %v", cfg, err)
			}
			// The device mapped its page into the VM's shared memory
			// region through SHMEM_MAP.
			if _, err := vm.ShmemMapped(0, 0, 4096); err != nil {
				t.Fatalf("shared memory page not mapped: %v", err)
			}

			// Stop and start again: rings resume where they stopped.
			if err := vm.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := vm.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if got := echo(t, vm, 0, []byte("again")); string(got) != "again" {
				t.Fatalf("after stop/start: %q", got)
			}

			// Reset: the guest re-initialises its rings.
			if err := vm.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			if err := vm.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if got := echo(t, vm, 0, []byte("reset")); string(got) != "reset" {
				t.Fatalf("after reset: %q", got)
			}

			// Reconnect (the VMM's socket drops; QEMU reconnects).
			if err := vm.Reconnect(ctx); err != nil {
				t.Fatal(err)
			}
			if got := echo(t, vm, 0, []byte("reconnected")); string(got) != "reconnected" {
				t.Fatalf("after reconnect: %q", got)
			}
			if _, err := vm.ShmemMapped(0, 0, 4096); err != nil {
				t.Fatalf("shared memory not re-mapped after reconnect: %v", err)
			}
		})
	}
}

// A request the guest queued while the back-end was gone, with its kick
// lost with the old connection, is served once the VMM reconnects: QEMU
// starts every ring with its kick eventfd already signalled, and the ring
// starts on that first kick.
func TestQueuedWhileDisconnectedIsServed(t *testing.T) {
	dev := vhost.NewEchoDevice(t)
	b := vhost.NewBackend(dev, vhost.Options{})
	vm := newVM(t, vhosttest.Serve(t, b, "dev"), 64<<20, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := echo(t, vm, 0, []byte("first")); string(got) != "first" {
		t.Fatalf("echo: %q", got)
	}
	// The guest queues a request but its kick goes nowhere (the back-end
	// is about to vanish): publish without kicking.
	msg := []byte("queued")
	in, err := vm.Alloc(uint64(len(msg)), 64)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := vm.Alloc(uint64(len(msg)), 64)
	v, err := vm.Memory().Translate(in, uint64(len(msg)))
	if err != nil {
		t.Fatal(err)
	}
	v.CopyIn(0, msg)
	q := vm.Queue(0)
	head, err := q.Add([]virtio.Buffer{{Addr: in, Len: uint32(len(msg))}}, []virtio.Buffer{{Addr: out, Len: uint32(len(msg))}})
	if err != nil {
		t.Fatal(err)
	}
	q.Publish()
	if err := vm.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if err := vm.WaitInterrupt(ctx, 0); err != nil {
			t.Fatalf("the queued request was never served: %v", err)
		}
		if h, n, ok := q.GetUsed(); ok {
			res, _ := vm.Memory().Translate(out, uint64(n))
			if h != head || string(res.Bytes()) != "queued" {
				t.Fatalf("used head %d (want %d), %q", h, head, res.Bytes())
			}
			return
		}
	}
}
