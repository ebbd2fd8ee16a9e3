package hotplug

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/testkit/qmptest"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestAttachDetach(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{})
	if v := c.Version(); v.String() != "10.2.0" || !v.AtLeast(10, 2) || v.AtLeast(10, 3) {
		t.Fatalf("version %v", v)
	}

	a, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"})
	if err != nil {
		t.Fatal(err)
	}
	want := PCIDevice{Address: PCIAddress{Bus: 1}, VendorID: abi.PCIVendorID, DeviceID: abi.PCIDeviceID, QdevID: "vst0"}
	if a.PCI == nil || *a.PCI != want || a.Chardev != "vst0-chr" || a.Driver != DefaultDriver || a.Note != "" {
		t.Fatalf("attached %+v pci %+v", a, a.PCI)
	}
	if s := a.PCI.Address.String(); s != "01:00.0" {
		t.Errorf("address %s", s)
	}
	devs := srv.Devices()
	if len(devs) != 1 || devs[0] != (qmptest.Device{ID: "vst0", Driver: DefaultDriver, Chardev: "vst0-chr", Bus: "rp0",
		VirtioID: 42, NumQueues: 3, QueueSize: 256, ConfigSize: 256}) {
		t.Fatalf("devices %+v", devs)
	}
	chr := srv.Chardevs()
	if len(chr) != 1 || chr[0] != (qmptest.Chardev{ID: "vst0-chr", Path: be.path, Connected: true, Device: "vst0"}) {
		t.Fatalf("chardevs %+v", chr)
	}
	conn := be.waitConns(t, 1)[0] // QEMU's vhost-user connection
	if got, want := srv.Commands(), []string{"qmp_capabilities", "query-version", "chardev-add", "device_add", "query-pci"}; !slices.Equal(got, want) {
		t.Fatalf("commands %v, want %v", got, want)
	}

	d, err := c.Detach(context.Background(), "vst0")
	if err != nil {
		t.Fatal(err)
	}
	if d != (Detached{ID: "vst0", Chardev: "vst0-chr"}) {
		t.Fatalf("detached %+v", d)
	}
	if len(srv.Devices()) != 0 || len(srv.Chardevs()) != 0 {
		t.Fatalf("left in QEMU: %+v %+v", srv.Devices(), srv.Chardevs())
	}
	if got := srv.Commands()[5:]; !slices.Equal(got, []string{"qom-get", "device_del", "chardev-remove"}) {
		t.Fatalf("detach commands %v", got)
	}
	if !closedByPeer(t, conn) {
		t.Error("the vhost-user connection is still open after detach")
	}
}

func TestAttachRefusedRollsBack(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{})
	srv.SetFaults(qmptest.Faults{Commands: map[string]qmptest.Fault{
		"device_add": {Kind: qmptest.Refuse, Class: "GenericError", Desc: "vhost_backend_init failed: Protocol error"},
	}})
	_, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"})
	se := asStep(t, err)
	var qe *QMPError
	if se.Step != "device_add" || !errors.As(err, &qe) || *qe != (QMPError{Command: "device_add", Class: "GenericError", Desc: "vhost_backend_init failed: Protocol error"}) {
		t.Fatalf("error %v", err)
	}
	if !slices.Equal(se.RolledBack, []string{"chardev-remove vst0-chr"}) || se.RollbackErr != nil {
		t.Fatalf("rollback %v %v", se.RolledBack, se.RollbackErr)
	}
	if !strings.Contains(err.Error(), "attach vst0: device_add: QEMU refused device_add: GenericError: vhost_backend_init failed") {
		t.Errorf("message %q", err)
	}
	if len(srv.Chardevs()) != 0 || len(srv.Devices()) != 0 {
		t.Fatalf("left in QEMU: %+v %+v", srv.Chardevs(), srv.Devices())
	}
	if !closedByPeer(t, be.waitConns(t, 1)[0]) {
		t.Error("QEMU's connection to the backend survived the rollback")
	}
	// The client is still usable.
	srv.SetFaults(qmptest.Faults{})
	if _, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"}); err != nil {
		t.Fatal(err)
	}
}

func TestAttachHints(t *testing.T) {
	noLeaks(t)
	dir := tempDir(t)
	be := startBackend(t, filepath.Join(dir, "vm1.sock"))

	old := startQMP(t, dir, qmptest.Options{Version: [3]int{10, 0, 2}, Drivers: []string{"virtio-net-pci"}})
	c := dialT(t, old.Path(), Options{})
	_, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"})
	se := asStep(t, err)
	if se.Step != "device_add" || !strings.Contains(se.Hint, "user-creatable from QEMU 10.2") ||
		!strings.Contains(err.Error(), "'vhost-user-test-device-pci' is not a valid device model name") {
		t.Fatalf("error %v", err)
	}
	if len(old.Chardevs()) != 0 {
		t.Fatal("chardev left")
	}

	sub := tempDir(t)
	q35 := startQMP(t, sub, qmptest.Options{})
	c = dialT(t, q35.Path(), Options{})
	_, err = c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path})
	if se := asStep(t, err); !strings.Contains(se.Hint, "pcie-root-port") || len(q35.Chardevs()) != 0 {
		t.Fatalf("error %v", err)
	}
}

// A chardev-add QEMU refuses added nothing: the chardev of that id, if
// there is one, is someone else's and stays.
func TestAttachChardevRefusedChangesNothing(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{})
	if _, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp1"})
	se := asStep(t, err)
	if se.Step != "chardev-add" || len(se.RolledBack) != 0 || !strings.Contains(err.Error(), "Chardev with id 'vst0-chr' already exists") {
		t.Fatalf("error %v", err)
	}
	if len(srv.Chardevs()) != 1 || len(srv.Devices()) != 1 {
		t.Fatalf("state changed: %+v %+v", srv.Chardevs(), srv.Devices())
	}

	_, err = c.Attach(context.Background(), Spec{ID: "vst1", Socket: filepath.Join(filepath.Dir(be.path), "none.sock"), Bus: "rp1"})
	if se := asStep(t, err); se.Step != "chardev-add" || !strings.Contains(err.Error(), "Failed to connect to") ||
		!strings.Contains(err.Error(), "No such file or directory") || len(srv.Chardevs()) != 1 {
		t.Fatalf("error %v", err)
	}
}

func TestAttachInvalidSpecSendsNothing(t *testing.T) {
	noLeaks(t)
	dir := tempDir(t)
	srv := startQMP(t, dir, qmptest.Options{})
	c := dialT(t, srv.Path(), Options{})
	sock := filepath.Join(dir, "vm1.sock")
	for _, s := range []Spec{
		{Socket: sock},
		{ID: "0vst", Socket: sock},
		{ID: "vst0", Socket: "vm1.sock"},
		{ID: "vst0", Socket: sock, Bus: "rp0,addr=3"},
		{ID: "vst0", Socket: sock, QueueSize: 2048},
		{ID: "vst0", Socket: sock, NumQueues: 2},
	} {
		if _, err := c.Attach(context.Background(), s); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for _, id := range []string{"", "a b", strings.Repeat("a", MaxIDLen+1)} {
		if _, err := c.Detach(context.Background(), id); !errors.Is(err, ErrInvalid) {
			t.Errorf("detach %q: %v", id, err)
		}
	}
	if got := srv.Commands(); len(got) != 2 {
		t.Fatalf("sent %v", got)
	}
}

func TestAttachUnnumberedBridge(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{Unnumbered: true}, Options{})
	a, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp1"})
	if err != nil {
		t.Fatal(err)
	}
	if a.PCI != nil || !strings.Contains(a.Note, "not numbered") || len(srv.Devices()) != 1 {
		t.Fatalf("attached %+v", a)
	}
	if cmds := srv.Commands(); cmds[len(cmds)-1] != "qom-get" {
		t.Fatalf("commands %v", cmds)
	}
}

func TestAttachRootBus(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{RootHotplug: true}, Options{})
	var wg sync.WaitGroup
	got := make([]Attached, 3)
	errs := make([]error, 3)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = c.Attach(context.Background(), Spec{ID: "vst" + string(rune('0'+i)), Socket: be.path, Reconnect: time.Second})
		}()
	}
	wg.Wait()
	slots := map[int]bool{}
	for i := range got {
		if errs[i] != nil || got[i].PCI == nil || got[i].PCI.Address.Bus != 0 {
			t.Fatalf("attach %d: %+v %v", i, got[i], errs[i])
		}
		slots[got[i].PCI.Address.Slot] = true
	}
	if !slots[3] || !slots[4] || !slots[5] {
		t.Fatalf("slots %v, want 3, 4, 5 (after the host bridge and two root ports)", slots)
	}
	for _, ch := range srv.Chardevs() {
		if ch.Reconnect != 1000 {
			t.Errorf("chardev %+v: reconnect-ms not sent", ch)
		}
	}
}

// A command QEMU never answers: the client gives up, and undoes the
// attach over a new connection (the old one is out of step for good).
func TestAttachNoReplyRollsBackOnNewConnection(t *testing.T) {
	for _, executed := range []bool{true, false} {
		t.Run(map[bool]string{true: "device-added", false: "device-not-added"}[executed], func(t *testing.T) {
			srv, be, c := rig(t, qmptest.Options{}, Options{CommandTimeout: 300 * time.Millisecond})
			srv.SetFaults(qmptest.Faults{Commands: map[string]qmptest.Fault{"device_add": {Kind: qmptest.Silent, Execute: executed}}})
			start := time.Now()
			_, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"})
			se := asStep(t, err)
			if se.Step != "device_add" || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no reply within 300ms") {
				t.Fatalf("error %v", err)
			}
			want := []string{"chardev-remove vst0-chr"}
			if executed {
				want = []string{"device_del vst0", "chardev-remove vst0-chr"}
			}
			if !slices.Equal(se.RolledBack, want) || se.RollbackErr != nil {
				t.Fatalf("rolled back %v, %v", se.RolledBack, se.RollbackErr)
			}
			if len(srv.Chardevs()) != 0 || len(srv.Devices()) != 0 || srv.Connections() != 2 {
				t.Fatalf("state %+v %+v after %d connections", srv.Chardevs(), srv.Devices(), srv.Connections())
			}
			if _, err := c.Execute(context.Background(), "query-version", nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("client after a lost reply: %v", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

func TestDetachWaitsForGuest(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{UnplugTimeout: 300 * time.Millisecond})
	if _, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"}); err != nil {
		t.Fatal(err)
	}
	srv.SetFaults(qmptest.Faults{NoDeviceDeleted: true})
	_, err := c.Detach(context.Background(), "vst0")
	se := asStep(t, err)
	if se.Step != "DEVICE_DELETED" || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(se.Hint, "detach again") {
		t.Fatalf("error %v", err)
	}
	if len(srv.Chardevs()) != 1 || len(srv.Devices()) != 1 || !srv.Devices()[0].Unplugging {
		t.Fatalf("state %+v %+v", srv.Chardevs(), srv.Devices())
	}
	// The guest lets go at last: the second Detach finds the unplug
	// under way, waits for it and removes the chardev.
	srv.SetFaults(qmptest.Faults{})
	d, err := c.Detach(context.Background(), "vst0")
	if err != nil || d.Chardev != "vst0-chr" {
		t.Fatalf("second detach: %+v %v", d, err)
	}
	if len(srv.Chardevs()) != 0 || len(srv.Devices()) != 0 {
		t.Fatalf("state %+v %+v", srv.Chardevs(), srv.Devices())
	}
}

// QEMU may send DEVICE_DELETED before device_del's reply: Detach
// listens before it sends.
func TestDetachEventBeforeReply(t *testing.T) {
	_, be, c := rig(t, qmptest.Options{DeleteDelay: time.Nanosecond}, Options{UnplugTimeout: 5 * time.Second})
	for i := 0; i < 20; i++ {
		if _, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Detach(context.Background(), "vst0"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDetachRefusals(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{})
	ctx := context.Background()

	// Not a vhost-user device: refused, nothing changed.
	if _, err := c.Execute(ctx, "device_add", map[string]any{"driver": "virtio-net-pci", "id": "net0", "bus": "rp1"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Detach(ctx, "net0")
	if se := asStep(t, err); se.Step != "qom-get chardev" || !strings.Contains(se.Hint, "not a vhost-user device") ||
		!strings.Contains(err.Error(), "Property 'virtio-net-pci.chardev' not found") || len(srv.Devices()) != 1 {
		t.Fatalf("error %v", err)
	}

	// No such device.
	_, err = c.Detach(ctx, "vst9")
	var qe *QMPError
	if se := asStep(t, err); !errors.As(err, &qe) || qe.Class != "DeviceNotFound" || !strings.Contains(se.Hint, "no device") {
		t.Fatalf("error %v", err)
	}

	// The device is gone but its chardev is left: Detach removes it.
	if _, err := c.Execute(ctx, "chardev-add", map[string]any{"id": "vst9-chr", "backend": map[string]any{"type": "socket",
		"data": map[string]any{"addr": map[string]any{"type": "unix", "data": map[string]any{"path": be.path}}, "server": false}}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Detach(ctx, "vst9")
	if err != nil || d.Chardev != "vst9-chr" || !strings.Contains(d.Note, "leftover") || len(srv.Chardevs()) != 0 {
		t.Fatalf("detach leftover: %+v %v %+v", d, err, srv.Chardevs())
	}
}

func TestCloseDuringAttach(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{CommandTimeout: time.Minute})
	srv.SetFaults(qmptest.Faults{Commands: map[string]qmptest.Fault{"device_add": {Kind: qmptest.Silent}}})
	done := make(chan error, 1)
	go func() {
		_, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"})
		done <- err
	}()
	for !slices.Contains(srv.Commands(), "device_add") {
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	select {
	case err := <-done:
		se := asStep(t, err)
		if !errors.Is(err, ErrClosed) || se.RollbackErr == nil || !strings.Contains(se.RollbackErr.Error(), "closed") {
			t.Fatalf("error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Attach still blocked after Close")
	}
}

func TestAttachContextCancelled(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{CommandTimeout: time.Minute})
	srv.SetFaults(qmptest.Faults{Commands: map[string]qmptest.Fault{"query-pci": {Kind: qmptest.Silent, Execute: true}}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !slices.Contains(srv.Commands(), "query-pci") {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err := c.Attach(ctx, Spec{ID: "vst0", Socket: be.path, Bus: "rp0"})
	se := asStep(t, err)
	// The rollback runs on a context of its own, on a new connection.
	if se.Step != "query-pci" || !errors.Is(err, context.Canceled) || se.RollbackErr != nil || len(se.RolledBack) != 2 {
		t.Fatalf("error %v", err)
	}
	if len(srv.Devices()) != 0 || len(srv.Chardevs()) != 0 {
		t.Fatalf("state %+v %+v", srv.Devices(), srv.Chardevs())
	}
}

// With reconnect-ms, QEMU connects the chardev in the background, and a
// device_add before it has connected fails: Attach waits for the
// connection, and gives up (removing the chardev) if it never comes.
func TestAttachWaitsForTheReconnectingChardev(t *testing.T) {
	srv, be, c := rig(t, qmptest.Options{}, Options{CommandTimeout: 300 * time.Millisecond})
	if _, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0", Reconnect: time.Second}); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(filepath.Dir(be.path), "none.sock")
	_, err := c.Attach(context.Background(), Spec{ID: "vst1", Socket: none, Bus: "rp1", Reconnect: time.Second})
	se := asStep(t, err)
	if se.Step != "chardev-add" || !strings.Contains(err.Error(), "did not connect") ||
		!slices.Equal(se.RolledBack, []string{"chardev-remove vst1-chr"}) {
		t.Fatalf("error %v, rolled back %v", err, se.RolledBack)
	}
	if len(srv.Chardevs()) != 1 || len(srv.Devices()) != 1 {
		t.Fatalf("left in QEMU: %+v %+v", srv.Chardevs(), srv.Devices())
	}
}
