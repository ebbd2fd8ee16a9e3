package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/daemonproc"
	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// daemonProc is a vstellard process with its run directory.
type daemonProc struct {
	*daemonproc.Proc
	runDir string
}

// The other tests of the package build and log daemons of their own.
var buildDaemon = daemonproc.Binary

type syncBuffer = daemonproc.Log

func startDaemon(t *testing.T, devices ...string) *daemonProc {
	t.Helper()
	// Unix socket paths are short; keep the run dir near the root.
	runDir, err := os.MkdirTemp("", "vse2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	args := []string{"--run-dir", runDir, "--log-format", "json", "--log-level", "debug"}
	for _, d := range devices {
		args = append(args, "--device", d)
	}
	p := &daemonProc{Proc: daemonproc.Start(t, args...), runDir: runDir}
	// Ready once the API answers and lists every device.
	c := api.NewClient(filepath.Join(runDir, "vstellard.sock"))
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ds, err := c.Devices(ctx)
		cancel()
		if err == nil && len(ds) == len(devices) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("vstellard not ready: %v\n%s", err, p.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *daemonProc) socket(name string) string { return filepath.Join(p.runDir, name+".sock") }

func bootVM(t *testing.T, socket string, mem uint64) (*vmsim.VM, *guestdriver.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vm, err := vmsim.New(ctx, vmsim.DeviceConfig(socket, mem))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	drv, err := guestdriver.Open(ctx, vmsim.NewTransport(vm))
	if err != nil {
		t.Fatal(err)
	}
	return vm, drv
}

func query(t *testing.T, drv *guestdriver.Device, what string) abi.DeviceAttr {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := drv.QueryDevice(ctx)
	if err != nil {
		t.Fatalf("QUERY_DEVICE %s: %v", what, err)
	}
	if a.VendorPartID != abi.PCIDeviceID || a.MaxQP == 0 {
		t.Fatalf("QUERY_DEVICE %s: %+v", what, a)
	}
	return a
}

// The end-to-end path: a separate vstellard process; the full
// handshake; config space; QUERY_DEVICE; reset; reconnect; shutdown.
func TestDaemonProcessLifeCycle(t *testing.T) {
	p := startDaemon(t, "vm0", "vm1")
	ctx := context.Background()

	vm, drv := bootVM(t, p.socket("vm0"), 4<<30)
	cfg, err := vm.ReadConfig(ctx)
	if err != nil || len(cfg) != abi.ConfigSize {
		t.Fatalf("GET_CONFIG: %d bytes, %v", len(cfg), err)
	}
	if v := binary.LittleEndian.Uint32(cfg[abi.ConfigOffABIVersion:]); v != abi.ABIVersion {
		t.Fatalf("config ABI version %#x", v)
	}
	if drv.Config().Status&abi.ConfigStatusDoorbellShmem == 0 {
		t.Fatalf("doorbells not in the shared memory region: status %#x", drv.Config().Status)
	}
	first := query(t, drv, "after boot")

	// Guest reset: stop, reset, start, re-probe.
	if err := vm.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	drv, err = guestdriver.Open(ctx, vmsim.NewTransport(vm))
	if err != nil {
		t.Fatal(err)
	}
	query(t, drv, "after reset")

	// The VMM's socket drops and it reconnects, replaying the handshake.
	if err := vm.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if again := query(t, drv, "after reconnect"); again.NodeGUID != first.NodeGUID {
		t.Fatalf("device identity changed across a reconnect: %#x -> %#x", first.NodeGUID, again.NodeGUID)
	}
	if _, err := drv.Doorbells(); err != nil {
		t.Fatalf("doorbells after reconnect: %v", err)
	}

	// The VMM dies without a word; a new VMM process takes the device.
	vm.Close()
	_, drv2 := bootVM(t, p.socket("vm0"), 1<<30)
	if again := query(t, drv2, "from a new VMM"); again.NodeGUID != first.NodeGUID {
		t.Fatalf("device identity changed: %#x -> %#x", first.NodeGUID, again.NodeGUID)
	}

	// SIGTERM: every connected front-end hears of it, the process exits 0
	// and leaves nothing in the run dir.
	vm1, _ := bootVM(t, p.socket("vm1"), 1<<30)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.Exited:
		p.Exited <- err
		if err != nil {
			t.Fatalf("vstellard exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("vstellard did not exit after SIGTERM")
	}
	select {
	case <-vm1.ConfigChanges():
	case <-time.After(time.Second):
		t.Fatal("front-end was not told of the shutdown")
	}
	if ents, _ := os.ReadDir(p.runDir); len(ents) != 0 {
		t.Fatalf("run dir not empty after shutdown: %v", ents)
	}
	if strings.Contains(p.Logs.String(), "panic") {
		t.Fatalf("daemon logged a panic:\n%s", p.Logs.String())
	}
}

// A hostile front-end on one device gets its connection dropped; the
// daemon and the device next to it go on as if nothing happened.
func TestHostileFrontEndIsolated(t *testing.T) {
	p := startDaemon(t, "good", "bad")
	_, drv := bootVM(t, p.socket("good"), 1<<30)
	query(t, drv, "before the attack")

	attacks := map[string][]byte{
		"bad version":      {1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0},
		"huge payload":     {5, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f},
		"truncated header": {1, 0, 0},
		"short payload":    {2, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 1, 2},
	}
	for name, bytes := range attacks {
		c, err := net.Dial("unix", p.socket("bad"))
		if err != nil {
			t.Fatal(err)
		}
		c.Write(bytes)
		c.(*net.UnixConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := bufio.NewReader(c).ReadByte(); err == nil {
			t.Errorf("%s: the daemon answered", name)
		}
		c.Close()
		query(t, drv, "during the attack: "+name)
	}
	// The attacked device still serves a well-behaved VMM afterwards.
	_, drvBad := bootVM(t, p.socket("bad"), 1<<30)
	query(t, drvBad, "on the attacked device")
	select {
	case err := <-p.Exited:
		t.Fatalf("vstellard exited: %v", err)
	default:
	}
}
