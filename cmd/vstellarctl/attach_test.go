package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/testkit/qmptest"
)

// hotplugRig is a daemon with fake devices (boot0) and a QMP server
// standing in for QEMU, in one short temporary directory.
type hotplugRig struct {
	dir    string
	api    string
	client *api.Client
	qemu   *qmptest.Server
}

func startHotplugRig(t *testing.T, qopts qmptest.Options) *hotplugRig {
	t.Helper()
	dir, err := os.MkdirTemp("", "vsa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := runDaemon(t, filepath.Join(dir, "run"))
	q, err := qmptest.Start(filepath.Join(dir, "qmp.sock"), qopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	cl := api.NewClient(m.APISocket())
	t.Cleanup(cl.Close)
	return &hotplugRig{dir: dir, api: m.APISocket(), client: cl, qemu: q}
}

// cmd runs one of the hot-plug commands as the CLI would.
func (r *hotplugRig) cmd(f func(*cli, context.Context, []string) error, args ...string) (string, error) {
	var out strings.Builder
	c := &cli{client: r.client, stdout: &out, timeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	err := f(c, ctx, args)
	return out.String(), err
}

func TestCtlAttachDetach(t *testing.T) {
	r := startHotplugRig(t, qmptest.Options{})
	dev, err := r.client.Device(context.Background(), "boot0")
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.cmd((*cli).attach, "--qmp", r.qemu.Path(), "boot0", "--bus", "rp0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"attached: vst-boot0\n", "qemu:     10.2.0\n", "chardev:  vst-boot0-chr\n",
		"socket:   " + dev.Socket + "\n", "bus:      rp0\n", "pci:      01:00.0 [1af4:106a]\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("attach output lacks %q:\n%s", want, out)
		}
	}
	// QEMU's chardev connected to the daemon's device socket, without
	// reconnect-ms by default (stock QEMU aborts on a reconnect).
	chr := r.qemu.Chardevs()
	if len(chr) != 1 || chr[0].Path != dev.Socket || !chr[0].Connected || chr[0].Reconnect != 0 {
		t.Fatalf("chardevs %+v", chr)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if d, err := r.client.Device(context.Background(), "boot0"); err == nil && d.Connected {
			break
		} else if time.Now().After(end) {
			t.Fatalf("the daemon saw no front-end: %+v %v", d, err)
		}
	}

	out, err = r.cmd((*cli).detach, "--qmp", r.qemu.Path(), "boot0")
	if err != nil || out != "detached vst-boot0 (chardev vst-boot0-chr removed)\n" {
		t.Fatalf("detach: %q %v", out, err)
	}
	if len(r.qemu.Devices()) != 0 || len(r.qemu.Chardevs()) != 0 {
		t.Fatalf("left in QEMU: %+v %+v", r.qemu.Devices(), r.qemu.Chardevs())
	}

	// --socket-path needs no daemon; --json prints the result.
	sock := dev.Socket
	out, err = r.cmd((*cli).attach, "--json", "--qmp", r.qemu.Path(), "--socket-path", sock, "--id", "rdma0", "--bus", "rp1", "--reconnect", "0")
	var a hotplug.Attached
	if err != nil || json.Unmarshal([]byte(out), &a) != nil || a.ID != "rdma0" || a.Socket != sock || a.PCI == nil || a.PCI.Address.Bus != 2 {
		t.Fatalf("attach --json: %q %v", out, err)
	}
	if r.qemu.Chardevs()[0].Reconnect != 0 {
		t.Error("--reconnect 0 sent a reconnect")
	}
	out, err = r.cmd((*cli).detach, "--qmp", r.qemu.Path(), "--id", "rdma0", "--json")
	var d hotplug.Detached
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || d != (hotplug.Detached{ID: "rdma0", Chardev: "rdma0-chr"}) {
		t.Fatalf("detach --json: %q %v", out, err)
	}
}

func TestCtlAttachErrors(t *testing.T) {
	r := startHotplugRig(t, qmptest.Options{Version: [3]int{10, 0, 2}, Drivers: []string{"virtio-net-pci"}})
	q := r.qemu.Path()
	sock := filepath.Join(r.dir, "run", "boot0.sock")
	for _, tc := range []struct {
		f    func(*cli, context.Context, []string) error
		args []string
		want string
	}{
		{(*cli).attach, []string{"boot0"}, "attach needs --qmp"},
		{(*cli).attach, []string{"--qmp", q}, "a DEVICE_NAME or --socket-path"},
		{(*cli).attach, []string{"--qmp", q, "boot0", "--socket-path", sock}, "not both"},
		{(*cli).attach, []string{"--qmp", q, "a", "b"}, "one DEVICE_NAME"},
		{(*cli).attach, []string{"--qmp", q, "--socket-path", "boot0.sock", "--id", "x"}, "not absolute"},
		{(*cli).attach, []string{"--qmp", q, "boot0", "--id", "9x"}, "must start with a letter"},
		{(*cli).attach, []string{"--qmp", q, "--socket-path", "/run/a b.sock"}, "give --id"},
		{(*cli).attach, []string{"--qmp", q, "boot0", "--frob"}, "flag provided but not defined"},
		{(*cli).detach, []string{"--id", "x"}, "detach needs --qmp"},
		{(*cli).detach, []string{"--qmp", q}, "--id or one DEVICE_NAME"},
		{(*cli).detach, []string{"--qmp", q, "--id", "x", "boot0"}, "--id or one DEVICE_NAME"},
		{(*cli).detach, []string{"--qmp", q, "--id", "x y"}, "outside [A-Za-z0-9_.-]"},
		{(*cli).qemuArgs, []string{}, "DEVICE_NAMEs or --socket-path"},
		{(*cli).qemuArgs, []string{"boot0", "--mem", "4X"}, "want a whole number of bytes"},
		{(*cli).qemuArgs, []string{"boot0", "--mem", "4iB"}, "a unit needs K, M, G or T"},
		{(*cli).qemuArgs, []string{"boot0", "--mem", "1000"}, "not a whole number of MiB"},
		{(*cli).qemuArgs, []string{"boot0", "--mem-layout", "hugepages"}, "memory layout"},
		{(*cli).qemuArgs, []string{"a", "b", "--bus", "rp0", "--run-dir", "/run/vstellar"}, "go with one device"},
		{(*cli).qemuArgs, []string{"../x", "--run-dir", "/run/vstellar"}, "device name"},
	} {
		out, err := r.cmd(tc.f, tc.args...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) || out != "" {
			t.Errorf("%v: %q %v, want usage error %q", tc.args, out, err, tc.want)
		}
	}
	if cmds := r.qemu.Commands(); len(cmds) != 0 {
		t.Fatalf("usage errors reached QEMU: %v", cmds)
	}

	// No such device: the daemon's 404, before QEMU is contacted.
	_, err := r.cmd((*cli).attach, "--qmp", q, "nosuch")
	var apiErr *api.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || len(r.qemu.Commands()) != 0 {
		t.Fatalf("unknown device: %v", err)
	}

	// QEMU refuses (10.0 has no such device): the step, QEMU's words,
	// the hint and the rollback.
	_, err = r.cmd((*cli).attach, "--qmp", q, "boot0", "--bus", "rp0")
	for _, want := range []string{"attach vst-boot0: device_add", "'vhost-user-test-device-pci' is not a valid device model name",
		"from QEMU 10.2", "rolled back: chardev-remove vst-boot0-chr"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refused attach: %v, want %q", err, want)
		}
	}
	if errors.Is(err, errUsage) || len(r.qemu.Chardevs()) != 0 {
		t.Errorf("refused attach: usage %v, chardevs %+v", errors.Is(err, errUsage), r.qemu.Chardevs())
	}

	// Through run: exit statuses.
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"--socket", r.api, "attach", "--qmp", q, "nosuch"}, &stdout, &stderr); code != exitNotFound {
		t.Errorf("unknown device: exit %d, %s", code, stderr.String())
	}
	if code := run(context.Background(), []string{"--socket", r.api, "attach", "--qmp", q}, &stdout, &stderr); code != exitUsage {
		t.Errorf("usage: exit %d", code)
	}
	if code := run(context.Background(), []string{"--socket", r.api, "attach", "--qmp", filepath.Join(r.dir, "none.sock"), "boot0"}, &stdout, &stderr); code != exitFailed {
		t.Errorf("no QEMU: exit %d", code)
	}
}

func TestCtlQEMUArgs(t *testing.T) {
	r := startHotplugRig(t, qmptest.Options{})
	out, err := r.cmd((*cli).qemuArgs, "vm1-rdma0", "--mem", "16G", "--run-dir", "/run/vstellar", "--bus", "rp1", "--reconnect", "1s")
	want := `-m 16G \
-object memory-backend-memfd,id=mem,size=16G,share=on \
-numa node,memdev=mem \
-chardev socket,id=vst-vm1-rdma0-chr,path=/run/vstellar/vm1-rdma0.sock,reconnect-ms=1000 \
-device vhost-user-test-device-pci,id=vst-vm1-rdma0,chardev=vst-vm1-rdma0-chr,virtio-id=42,num_vqs=3,vq_size=256,config_size=256,bus=rp1
`
	if err != nil || out != want {
		t.Fatalf("qemu-args:\n%s%v\nwant\n%s", out, err, want)
	}

	// Asking the daemon for the socket; a path that needs quoting; JSON.
	dev, err := r.client.Device(context.Background(), "boot0")
	if err != nil {
		t.Fatal(err)
	}
	out, err = r.cmd((*cli).qemuArgs, "boot0", "--mem", "1536M", "--mem-layout", "machine", "--json")
	var args []string
	if err != nil || json.Unmarshal([]byte(out), &args) != nil ||
		!slices.Equal(args[:6], []string{"-m", "1536M", "-object", "memory-backend-memfd,id=mem,size=1536M,share=on", "-machine", "memory-backend=mem"}) ||
		args[7] != "socket,id=vst-boot0-chr,path="+dev.Socket {
		t.Fatalf("qemu-args --json: %q %v", out, err)
	}
	out, err = r.cmd((*cli).qemuArgs, "--socket-path", "/run/my vm,1.sock", "--id", "rdma0", "--reconnect", "0")
	if err != nil || !strings.Contains(out, `-chardev 'socket,id=rdma0-chr,path=/run/my vm,,1.sock' \`) {
		t.Fatalf("qemu-args --socket-path:\n%s%v", out, err)
	}
	out, err = r.cmd((*cli).qemuArgs, "a", "b", "--run-dir", "/run/vstellar")
	if err != nil || strings.Count(out, "-device vhost-user-test-device-pci") != 2 || !strings.Contains(out, "id=vst-b,") {
		t.Fatalf("two devices:\n%s%v", out, err)
	}
}
