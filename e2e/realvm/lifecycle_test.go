package realvm_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The device's life cycle in real VMs, under both QEMUs: a guest reboot,
// QEMU killed, vstellard restarted under a running QEMU, and hot-plug.
// Each proves its point with one VM whose QP is connected to itself (a
// loopback through the daemon's fabric): a WRITE checked by digest
// before and after.

// A guest that reboots probes the device again: RESET_STATE drops the
// objects of the previous boot, which the daemon no longer lists, and
// verbs work on the new boot.
func TestGuestReboot(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			r := newRig(t, hostsim.Options{})
			g := r.boot(qemu, "a", bootOptions{allowReboot: true})
			logReady(t, "boot", g)
			if st := r.status("a"); live(st) != 0 {
				t.Errorf("objects after the probe: %+v", *st.Objects)
			}
			sr := selfWrite(t, g, 1)
			st := r.status("a")
			if o := *st.Objects; o.PDs != 1 || o.CQs != 2 || o.QPs != 1 || o.MRs != 1 {
				t.Errorf("objects after Setup: %+v, want 1 PD, 2 CQs, 1 QP, 1 MR", o)
			}
			if !r.hasQP("a", sr.Endpoint.QPN) {
				t.Errorf("QP %d not listed after Setup", sr.Endpoint.QPN)
			}
			resets := st.Control.ByOpcode["reset_state"]

			asked := time.Now()
			if err := g.agent.Reboot(t.Context()); err != nil {
				t.Fatal(err)
			}
			g.agent.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			c, info, err := realvm.DialAgent(ctx, g.vm)
			if err != nil {
				fatalVM(t, g.vm, err)
			}
			t.Cleanup(func() { c.Close() })
			g.agent, g.info = c, info
			t.Logf("reboot: agent serving again %v after the request (guest program: device ready %.0f ms after its start)",
				time.Since(asked).Round(time.Millisecond), g.info.ReadyMicros/1e3)
			if n := boots(g.vm); n != 2 {
				t.Fatalf("%d boots on the console, want 2", n)
			}
			st = r.status("a")
			if live(st) != 0 || r.hasQP("a", sr.Endpoint.QPN) {
				t.Errorf("objects of the previous boot still there: %+v", *st.Objects)
			}
			if n := st.Control.ByOpcode["reset_state"]; n != resets+1 {
				t.Errorf("RESET_STATE count %d after the reboot, want %d", n, resets+1)
			}
			selfWrite(t, g, 2)
		})
	}
}

// QEMU killed with SIGKILL: the daemon sees the disconnect and unpins
// the guest's memory (it keeps the device's objects for a reconnect), no
// fd or goroutine is left behind, and a new QEMU on the same socket
// opens the device (RESET_STATE drops the dead VM's objects) and runs
// verbs.
func TestQEMUKilled(t *testing.T) {
	for _, qemu := range realvmQEMUs(t) {
		t.Run(qemu, func(t *testing.T) {
			r := newRig(t, hostsim.Options{})
			socket, err := r.host.CreateDevice(t.Context(), "a", hostsim.VMOptions{})
			if err != nil {
				t.Fatal(err)
			}
			base := r.usage()
			g := r.bootOn(qemu, "a", socket, bootOptions{})
			logReady(t, "boot", g)
			selfWrite(t, g, 1)
			if st := r.status("a"); st.Memory.PinnedBytes == 0 {
				t.Errorf("nothing pinned after a WRITE: %+v", *st.Memory)
			}

			g.vm.Kill()
			g.vm.Wait()
			g.agent.Close()
			st := r.waitStatus("a", "the disconnect", func(s api.DeviceStatus) bool { return !s.Connected })
			t.Logf("after SIGKILL: connected %v, objects kept %+v, pinned %d bytes (%d pins, %d unpins), last error %q",
				st.Connected, *st.Objects, st.Memory.PinnedBytes, st.Memory.Pins, st.Memory.Unpins, st.LastError)
			if st.Memory.PinnedBytes != 0 {
				t.Errorf("%d bytes still pinned after QEMU died", st.Memory.PinnedBytes)
			}
			r.checkLeaks("after SIGKILL", base)

			g = r.bootOn(qemu, "a", socket, bootOptions{})
			logReady(t, "new QEMU", g)
			st = r.status("a")
			if live(st) != 0 || st.Control.ByOpcode["reset_state"] != 2 || st.Connections != 2 {
				t.Errorf("new QEMU: objects %+v, %d RESET_STATEs, %d connections; want none, 2, 2",
					*st.Objects, st.Control.ByOpcode["reset_state"], st.Connections)
			}
			selfWrite(t, g, 2)
			if err := g.vm.Stop(t.Context()); err != nil {
				t.Error(err)
			}
			g.agent.Close()
			r.waitStatus("a", "the disconnect", func(s api.DeviceStatus) bool { return !s.Connected })
			r.checkLeaks("after the second QEMU quit", base)
		})
	}
}

// vstellard restarted under a running QEMU whose chardev reconnects: the
// new daemon's device knows none of the driver's objects, so the guest's
// next command on one fails with the device's status; the guest resets
// the device and opens it again, without a reboot, and verbs work. Under
// shared memory this is what proves that the new daemon replaces the
// old daemon's doorbell mapping, which QEMU keeps across reconnects.
//
// The device is hot-plugged: cold-plugged with reconnect-ms, QEMU (10.2
// and 11.1) fails to start ("vhost_backend_init failed: Protocol
// error"), as the generic device's realize does not wait for the
// chardev's first connection, which reconnect-ms makes asynchronous.
func TestDaemonRestart(t *testing.T) {
	for _, qemu := range qemusWhere(t, func(q realvm.QEMU) bool { return q.BackendReconnect },
		"its generic vhost-user device aborts QEMU when the back-end reconnects (vhost_dev_start: Assertion 'hdev->vhost_ops'); internal/realvm/qemu/0002-*.patch fixes it, and there is no 11.1 source here to apply it to") {
		t.Run(qemu, func(t *testing.T) {
			logs := newRecorder(testLogger(t).Handler())
			r := newRig(t, hostsim.Options{Log: slog.New(logs)})
			g, _ := r.plug(qemu, "a", 200*time.Millisecond)
			selfWrite(t, g, 1)

			dir := r.host.RunDir()
			if err := r.host.Shutdown(); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			h, err := hostsim.New(t.Context(), hostsim.Options{RunDir: dir, Log: r.log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			r.host = h
			if socket, err := h.CreateDevice(t.Context(), "a", hostsim.VMOptions{}); err != nil || socket != g.socket {
				t.Fatalf("device on the new daemon: %s, %v; want %s", socket, err, g.socket)
			}
			r.waitStatus("a", "QEMU's reconnect", func(s api.DeviceStatus) bool { return s.Connected })
			t.Logf("QEMU reconnected %v after the restart", time.Since(restarted).Round(time.Millisecond))

			// The agent destroys what it set up: the new device has none of it.
			err = g.agent.Reset(t.Context())
			var re *agent.RemoteError
			if !errors.As(err, &re) || re.Status == abi.StatusOK {
				fatalVM(t, g.vm, fmt.Errorf("a command on the old objects: %w; want a device status", err))
			}
			t.Logf("the guest's clean error: %v", err)

			asked := time.Now()
			if err := g.agent.Reopen(t.Context()); err != nil {
				t.Fatalf("reopen: %v", err)
			}
			t.Logf("device reopened in %v", time.Since(asked).Round(time.Millisecond))
			info, err := g.agent.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if want := doorbells(r, qemu); info.DoorbellMode != want {
				t.Errorf("doorbells %q after the reopen, want %q", info.DoorbellMode, want)
			}
			if n := boots(g.vm); n != 1 {
				t.Errorf("%d boots on the console: the guest rebooted", n)
			}
			st := r.status("a")
			if live(st) != 0 || st.Control.ByOpcode["reset_state"] != 1 {
				t.Errorf("new daemon after the reopen: objects %+v, %d RESET_STATEs; want none, 1",
					*st.Objects, st.Control.ByOpcode["reset_state"])
			}
			selfWrite(t, g, 2)
			const replaced = "replaced an earlier incarnation's shared memory mapping"
			if q, _ := r.env.QEMU(qemu); q.SharedMemory && !logs.saw(replaced) {
				t.Errorf("the new daemon never logged %q", replaced)
			}
		})
	}
}

// Hot-plug into a running guest that waits for the device, a WRITE, and
// hot-unplug: the guest program lets the device go when the kernel
// removes it, QEMU reports DEVICE_DELETED and the daemon sees the
// disconnect.
func TestHotPlug(t *testing.T) {
	for _, qemu := range qemusWhere(t, func(q realvm.QEMU) bool { return !q.SharedMemory },
		"device_del aborts QEMU 11.1.3 while a SHMEM_MAP mapping is live (memory_region_del_subregion: Assertion 'subregion->container == mr')") {
		t.Run(qemu, func(t *testing.T) {
			r := newRig(t, hostsim.Options{})
			g, q := r.plug(qemu, "a", 0)
			selfWrite(t, g, 1)

			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			detach := time.Now()
			if _, err := q.Detach(ctx, "vst0"); err != nil {
				fatalVM(t, g.vm, err) // no DEVICE_DELETED, or the chardev stayed
			}
			t.Logf("detached (DEVICE_DELETED, chardev removed) in %v", time.Since(detach).Round(time.Millisecond))
			r.waitStatus("a", "the disconnect", func(s api.DeviceStatus) bool { return !s.Connected })
			if _, err := g.vm.WaitSerial(ctx, "device removed: released it"); err != nil {
				t.Fatal(err)
			}
			if _, err := g.vm.WaitSerial(ctx, "waiting for one to be plugged in"); err != nil {
				t.Fatal(err)
			}
			if exited, err := g.vm.Exited(); exited {
				t.Fatalf("QEMU exited after the unplug: %v", err)
			}
		})
	}
}

// plug creates device name, starts a VM on qemu with a free PCIe root
// port and no device, its guest program waiting for one, and hot-plugs
// the device there (with the chardev's reconnect-ms, if not 0; a
// cold-plugged device cannot have it, see TestDaemonRestart). It returns
// the guest, its agent up, and the VM's QMP client.
func (r *rig) plug(qemu, name string, reconnect time.Duration) (*guest, *hotplug.Client) {
	t := r.t
	t.Helper()
	socket, err := r.host.CreateDevice(t.Context(), name, hostsim.VMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm := r.start(qemu, name, bootOptions{configure: func(c *realvm.Config) {
		c.Args = append(c.Args, "-device", "pcie-root-port,id=rp0,chassis=1")
		c.Append += " vstellar.wait=1"
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := vm.WaitSerial(ctx, "waiting for one to be plugged in"); err != nil {
		t.Fatal(err)
	}
	q, err := vm.QMP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	qm, _ := r.env.QEMU(qemu)
	spec := hotplug.Spec{ID: "vst0", Socket: socket, Bus: "rp0", VirtioID: qm.VirtioID, Reconnect: reconnect}
	attach := time.Now()
	a, err := q.Attach(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	where := "on rp0"
	switch {
	case a.PCI != nil:
		where = "at " + a.PCI.Address.String()
	case reconnect == 0:
		t.Fatalf("attached, but QEMU does not list the device: %s", a.Note)
	}
	line, err := vm.WaitSerial(ctx, "ms after the transport began to open")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hot-plugged %s: device ready %v after the attach began (guest program: %s ms from finding the device to its first command)",
		where, time.Since(attach).Round(time.Millisecond), guestReady(line))
	g := &guest{name: name, socket: socket, vm: vm}
	g.agent, g.info = r.dialAgent(vm, time.Minute)
	return g, q
}

// bootOn starts a VM on qemu with the device at socket cold-plugged and
// waits for its agent.
func (r *rig) bootOn(qemu, name, socket string, o bootOptions) *guest {
	r.t.Helper()
	g := &guest{name: name, socket: socket}
	g.vm = r.start(qemu, name, o, hotplug.Spec{Socket: socket, Reconnect: o.reconnect})
	g.agent, g.info = r.dialAgent(g.vm, 2*time.Minute)
	g.ready = time.Since(g.vm.Started())
	return g
}
