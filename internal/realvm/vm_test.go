package realvm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/testkit/vhosttest"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
	"golang.org/x/sys/unix"
)

// smokeInitramfs builds testdata/smokeinit as a static binary and packs it
// with the harness's modules.
func smokeInitramfs(t *testing.T, env *Env) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "init")
	// go test puts its own go first in PATH.
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/smokeinit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build smokeinit: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := env.Initramfs(initrd, bin); err != nil {
		t.Fatal(err)
	}
	return initrd
}

// stubDevice is a vhost-user device with the vStellar device's shape (3
// queues, 256 bytes of config) that does nothing: enough for QEMU to
// create the device and the guest to enumerate it.
type stubDevice struct{}

func (stubDevice) NumQueues() int                            { return abi.NumQueues }
func (stubDevice) MaxQueueSize() uint16                      { return abi.MaxQueueSize }
func (stubDevice) Features() uint64                          { return virtio.FeatureVersion1.Mask() }
func (stubDevice) ConfigSize() uint32                        { return abi.ConfigSize }
func (stubDevice) ReadConfig(uint32, []byte)                 {}
func (stubDevice) WriteConfig(uint32, []byte) error          { return nil }
func (stubDevice) ShmemRegions() []uint64                    { return nil }
func (stubDevice) Activate(context.Context, vhost.Env) error { return nil }
func (stubDevice) ProcessQueue(context.Context, int, *virtio.DeviceQueue, *guestmem.Table) error {
	return nil
}
func (stubDevice) Deactivate(bool) {}

// TestBoot boots the guest kernel under each QEMU with a vhost-user device
// of the QEMU's virtio id on a stub back-end; the guest loads the uio
// modules, finds the device with no driver claiming it, binds it to
// uio_pci_generic and powers off, and QEMU exits 0.
func TestBoot(t *testing.T) {
	env := Require(t)
	initrd := smokeInitramfs(t, env)
	var mods []string
	for _, m := range env.Kernel.Modules {
		mods = append(mods, m.Name)
	}
	for _, name := range env.QEMUNames() {
		t.Run(name, func(t *testing.T) {
			q := env.QEMUs[name]
			sock := vhosttest.Serve(t, vhost.NewBackend(stubDevice{}, vhost.Options{Name: "stub"}), "vs")
			cfg, err := env.Config(name)
			if err != nil {
				t.Fatal(err)
			}
			pciID := fmt.Sprintf("%04x:%04x", abi.PCIVendorID, 0x1040+q.VirtioID)
			cfg.Initrd = initrd
			cfg.Append = "SMOKE_MODULES=" + strings.Join(mods, ",") + " SMOKE_UIO=" + pciID
			cfg.Devices = []hotplug.Spec{{Socket: sock}}
			cfg.ConsoleLog = filepath.Join(t.TempDir(), "console.log")
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			vm, err := Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { vm.Kill(); vm.Wait() })
			if _, err := vm.WaitSerial(ctx, "SMOKE init started"); err != nil {
				t.Fatal(err)
			}
			boot := time.Since(vm.Started())
			if err := vm.Wait(); err != nil {
				t.Fatalf("QEMU did not exit 0 after the guest powered off: %v\n%s", err, vm.failure(err))
			}
			total := time.Since(vm.Started())
			log := vm.Log()
			for _, want := range []string{
				"SMOKE kernel " + env.Kernel.Version,
				"SMOKE module uio loaded",
				"SMOKE module uio_pci_generic loaded",
				" " + pciID + " driver=uio_pci_generic",
				fmt.Sprintf("device=0x%04x driver=none", q.VirtioID),
				"SMOKE uio /dev/uio0",
				"SMOKE powering off",
			} {
				if !strings.Contains(log, want) {
					t.Errorf("console lacks %q", want)
				}
			}
			for _, bad := range []string{"SMOKE error", "Kernel panic"} {
				if strings.Contains(log, bad) {
					t.Errorf("console has %q", bad)
				}
			}
			if t.Failed() {
				t.Logf("console:\n%s\nqemu stderr:\n%s", log, vm.Stderr())
			} else {
				var smoke []string
				for _, l := range strings.Split(log, "\n") {
					if strings.HasPrefix(l, "SMOKE ") {
						smoke = append(smoke, strings.TrimSpace(l))
					}
				}
				t.Logf("guest:\n%s", strings.Join(smoke, "\n"))
			}
			t.Logf("%s (%s): QEMU start to /init %v, to exit %v", name, q.Version, boot.Round(time.Millisecond), total.Round(time.Millisecond))
			if _, err := os.Stat(vm.Dir()); !os.IsNotExist(err) {
				t.Errorf("VM directory %s left behind (%v)", vm.Dir(), err)
			}
		})
	}
}

// TestAgentAndStop boots a guest that echoes lines on ttyS1, talks to it
// through VM.Agent, and stops QEMU with Stop (QMP quit) while the guest
// still runs.
func TestAgentAndStop(t *testing.T) {
	env := Require(t)
	initrd := smokeInitramfs(t, env)
	cfg, err := env.Config(StockQEMU)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kernel = env.Kernel.Vmlinux // the PVH boot
	cfg.Initrd = initrd
	cfg.Append = "SMOKE_AGENT=1"
	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	vm, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Kill(); vm.Wait() })

	q, err := vm.QMP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Stop must work while a caller holds the QMP socket.
	defer q.Close()
	if _, err := vm.WaitSerial(ctx, "SMOKE init started"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s, PVH boot of vmlinux: QEMU start to /init %v", StockQEMU, time.Since(vm.Started()).Round(time.Millisecond))
	if _, err := vm.WaitSerial(ctx, "SMOKE agent ready"); err != nil {
		t.Fatal(err)
	}
	c, err := vm.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("agent: %v", vm.failure(err))
		}
		if line == "echo ping\n" {
			break
		}
	}
	if _, err := q.Execute(ctx, "query-status", nil); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vm.Wait(); err != nil {
		t.Errorf("QEMU's exit after quit: %v", err)
	}
	t.Logf("Stop took %v", time.Since(start).Round(time.Millisecond))
	if strings.Contains(vm.Log(), "SMOKE powering off") {
		t.Error("the guest powered off by itself: Stop was not what ended it")
	}
	c.Close()
	q.Close()
	// Every goroutine of the VM (console, wait, stderr copy) ends with it.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after the VM ended, %d before", n, goroutines)
	}
}

// TestKillOnContext checks that a VM dies with the context it was started
// with, and that Kill and Stop after that are harmless.
func TestKillOnContext(t *testing.T) {
	env := Require(t)
	cfg, err := env.Config(PatchedQEMU)
	if err != nil {
		t.Fatal(err)
	}
	// No need to boot: an empty initramfs, and the VM is killed early.
	cfg.Initrd = filepath.Join(t.TempDir(), "empty.cpio")
	if err := BuildInitramfs(cfg.Initrd, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	vm, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel's first words prove QEMU is running the guest.
	wctx, wcancel := context.WithTimeout(t.Context(), time.Minute)
	defer wcancel()
	if _, err := vm.WaitSerial(wctx, "Linux version"); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-vm.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("VM still running 10s after its context ended")
	}
	if err := vm.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("QEMU exit = %v, want killed", err)
	}
	if err := unix.Kill(vm.Pid(), 0); err == nil {
		t.Errorf("pid %d still exists", vm.Pid())
	}
	vm.Kill()
	if err := vm.Stop(t.Context()); err != nil {
		t.Errorf("Stop after exit: %v", err)
	}
	if _, err := vm.WaitSerial(wctx, "never printed"); err == nil {
		t.Error("WaitSerial succeeded on a dead VM")
	}
}

// TestArgs checks the command line without running QEMU.
func TestArgs(t *testing.T) {
	cfg := Config{
		QEMU:    QEMU{Name: StockQEMU, VirtioID: 21},
		Kernel:  "/k",
		Initrd:  "/i",
		Append:  "x=1",
		Memory:  256 << 20,
		Machine: "q35",
		Devices: []hotplug.Spec{{Socket: "/run/a.sock"}, {ID: "b", Socket: "/run/b,c.sock", VirtioID: 42, Reconnect: time.Second}},
		Args:    []string{"-S"},
	}
	args, err := cfg.args("/tmp/realvm-x")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"-accel tcg -cpu max -smp 1 -machine q35 -nodefaults -no-user-config -display none",
		"-m 256M -object memory-backend-memfd,id=mem,size=256M,share=on -numa node,memdev=mem",
		"-kernel /k -initrd /i -append console=ttyS0 panic=-1 x=1",
		"-serial chardev:con",
		"-chardev socket,id=agent,path=/tmp/realvm-x/agent.sock,server=on,wait=off -serial chardev:agent",
		"-qmp unix:/tmp/realvm-x/qmp.sock,server=on,wait=off",
		"-no-reboot",
		"-chardev socket,id=vst0-chr,path=/run/a.sock -device vhost-user-test-device-pci,id=vst0,chardev=vst0-chr,virtio-id=21,num_vqs=3,vq_size=256,config_size=256",
		"-chardev socket,id=b-chr,path=/run/b,,c.sock,reconnect-ms=1000 -device vhost-user-test-device-pci,id=b,chardev=b-chr,virtio-id=42,",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("command line lacks %q:\n%s", want, line)
		}
	}
	if args[len(args)-1] != "-S" {
		t.Errorf("extra args not last: %q", args)
	}
	cfg.AllowReboot = true
	cfg.Devices = []hotplug.Spec{{Socket: "relative.sock"}}
	if _, err := cfg.args("/tmp/x"); err == nil {
		t.Error("a relative socket path was accepted")
	}
	cfg.Devices = nil
	if args, _ := cfg.args("/tmp/x"); slices.Contains(args, "-no-reboot") {
		t.Error("-no-reboot with AllowReboot")
	}
}

// TestStartFailures: a QEMU that refuses its command line ends the VM,
// and WaitSerial says why; a Config without a kernel is refused before
// anything starts.
func TestStartFailures(t *testing.T) {
	env := Require(t)
	cfg, err := env.Config(PatchedQEMU)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(t.Context(), cfg); err == nil {
		t.Fatal("Start without an initramfs succeeded")
	}
	cfg.Initrd = filepath.Join(t.TempDir(), "empty.cpio")
	if err := BuildInitramfs(cfg.Initrd, nil); err != nil {
		t.Fatal(err)
	}
	cfg.Args = []string{"-no-such-option"}
	vm, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = vm.Wait()
	if err == nil {
		t.Fatal("QEMU accepted -no-such-option")
	}
	_, err = vm.WaitSerial(t.Context(), "Linux version")
	if err == nil || !strings.Contains(err.Error(), "no-such-option") {
		t.Errorf("WaitSerial = %v, want QEMU's complaint", err)
	}
	if _, err := os.Stat(vm.Dir()); !os.IsNotExist(err) {
		t.Errorf("VM directory %s left behind", vm.Dir())
	}
}
