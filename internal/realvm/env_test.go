package realvm

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const fakeManifest = `{
  "schema": 1,
  "sid_root": "sid",
  "qemu": {
    "qemu-11.1.3": {
      "loader": "sid/lib64/ld-linux-x86-64.so.2",
      "library_path": ["sid/usr/lib/x86_64-linux-gnu", "sid/lib/x86_64-linux-gnu"],
      "binary": "sid/usr/bin/qemu-system-x86_64",
      "firmware_dirs": ["sid/usr/share/qemu", "sid/usr/share/seabios"],
      "version": "QEMU emulator version 11.1.3 (Debian 1:11.1.3+ds-1)",
      "virtio_id": 21,
      "shared_memory": true
    },
    "qemu-10.2.2-rdma": {
      "loader": "sid/lib64/ld-linux-x86-64.so.2",
      "library_path": ["sid/usr/lib/x86_64-linux-gnu", "sid/lib/x86_64-linux-gnu"],
      "binary": "qemu-10.2.2-rdma/qemu-system-x86_64",
      "firmware_dirs": ["sid/usr/share/qemu", "sid/usr/share/seabios"],
      "version": "QEMU emulator version 10.2.2 (Debian 1:10.2.2+ds-1)",
      "virtio_id": 42,
      "shared_memory": false
    }
  },
  "kernel": {
    "path": "kernel/vmlinuz",
    "vmlinux": "kernel/vmlinux",
    "version": "6.12.117+deb13-amd64",
    "package": "linux-image-6.12.117+deb13-amd64 6.12.117-1",
    "config": "kernel/config",
    "modules_alias": "kernel/modules.alias",
    "modules_builtin": "kernel/modules.builtin",
    "modules_builtin_modinfo": "kernel/modules.builtin.modinfo",
    "modules": [{"name": "uio", "path": "kernel/modules/uio.ko"}, {"name": "uio_pci_generic", "path": "kernel/modules/uio_pci_generic.ko"}]
  },
  "rdma": {
    "guest_root": "rdma/guest-root",
    "rdma_core": "65.0-1.1",
    "provider_abi": "65",
    "perftest": "25.01.0+0.80-1",
    "ucx": "1.18.1+ds-2+b1",
    "rdma_core_src": "/srv/rdma-core/src",
    "kernel_headers": "/usr/src/linux-headers-6.12.117+deb13-amd64",
    "newest_kernel_headers": "/usr/src/linux-headers-7.2.13+deb14-amd64",
    "checkpatch": "/srv/checkpatch/scripts/checkpatch.pl"
  },
  "standin_virtio_id": 21,
  "keys": {"sid": "abc"}
}`

var fakeFiles = []string{
	"sid/lib64/ld-linux-x86-64.so.2", "sid/usr/lib/x86_64-linux-gnu/", "sid/lib/x86_64-linux-gnu/",
	"sid/usr/bin/qemu-system-x86_64", "sid/usr/share/qemu/", "sid/usr/share/seabios/",
	"qemu-10.2.2-rdma/qemu-system-x86_64", "kernel/vmlinuz", "kernel/vmlinux", "kernel/config", "kernel/modules.alias",
	"kernel/modules.builtin", "kernel/modules.builtin.modinfo", "kernel/modules/uio.ko",
	"kernel/modules/uio_pci_generic.ko", "rdma/guest-root/",
}

// fakeHarness lays out a harness directory with empty files.
func fakeHarness(t *testing.T, manifest string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range fakeFiles {
		p := filepath.Join(dir, f)
		if strings.HasSuffix(f, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoad(t *testing.T) {
	dir := fakeHarness(t, fakeManifest)
	e, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.QEMUNames(); !slices.Equal(got, []string{PatchedQEMU, StockQEMU}) {
		t.Errorf("QEMUNames = %v", got)
	}
	stock, err := e.QEMU(StockQEMU)
	if err != nil {
		t.Fatal(err)
	}
	if stock.VirtioID != 21 || !stock.SharedMemory || e.StandinVirtioID != 21 {
		t.Errorf("stock: %+v, stand-in %d", stock, e.StandinVirtioID)
	}
	patched := e.QEMUs[PatchedQEMU]
	if patched.VirtioID != 42 || patched.SharedMemory || patched.Binary != filepath.Join(dir, "qemu-10.2.2-rdma/qemu-system-x86_64") {
		t.Errorf("patched: %+v", patched)
	}
	wantArgs := []string{
		"--library-path", filepath.Join(dir, "sid/usr/lib/x86_64-linux-gnu") + ":" + filepath.Join(dir, "sid/lib/x86_64-linux-gnu"),
		patched.Binary, "-L", filepath.Join(dir, "sid/usr/share/qemu"), "-L", filepath.Join(dir, "sid/usr/share/seabios"), "--version",
	}
	if got := patched.Args("--version"); !slices.Equal(got, wantArgs) {
		t.Errorf("Args = %q\nwant %q", got, wantArgs)
	}
	if cmd := patched.Command("--version"); cmd.Path != filepath.Join(dir, "sid/lib64/ld-linux-x86-64.so.2") {
		t.Errorf("Command runs %s, want the sid loader", cmd.Path)
	}
	if len(e.Kernel.Modules) != 2 || e.Kernel.Modules[0].Name != "uio" || e.Kernel.Modules[1].Path != filepath.Join(dir, "kernel/modules/uio_pci_generic.ko") {
		t.Errorf("modules %+v", e.Kernel.Modules)
	}
	if e.Kernel.Version != "6.12.117+deb13-amd64" || e.Keys["sid"] != "abc" {
		t.Errorf("kernel %+v keys %v", e.Kernel, e.Keys)
	}
	if _, err := e.QEMU("qemu-0.1"); err == nil {
		t.Error("QEMU of an unknown name: no error")
	}
	cfg, err := e.Config(StockQEMU)
	if err != nil || cfg.QEMU.Name != StockQEMU || cfg.Kernel != e.Kernel.Path {
		t.Errorf("Config = %+v, %v", cfg, err)
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := fakeHarness(t, fakeManifest)
	if err := os.Remove(filepath.Join(dir, "kernel/modules/uio.ko")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "kernel/modules/uio.ko") {
		t.Errorf("missing module: err = %v", err)
	}
	for name, m := range map[string]string{
		"schema":   strings.Replace(fakeManifest, `"schema": 1`, `"schema": 2`, 1),
		"json":     fakeManifest[:100],
		"no id":    strings.Replace(fakeManifest, `"virtio_id": 42`, `"virtio_id": 0`, 1),
		"absent":   "",
		"no qemus": `{"schema": 1, "sid_root": "sid", "qemu": {}, "kernel": {"path": "kernel/vmlinuz", "vmlinux": "kernel/vmlinux", "version": "x", "config": "kernel/config", "modules_alias": "kernel/modules.alias", "modules_builtin": "kernel/modules.builtin", "modules_builtin_modinfo": "kernel/modules.builtin.modinfo"}}`,
	} {
		dir := fakeHarness(t, m)
		if name == "absent" {
			os.Remove(filepath.Join(dir, "manifest.json"))
		}
		if _, err := Load(dir); err == nil {
			t.Errorf("%s: Load succeeded", name)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal.
type recorder struct {
	testing.TB
	skipped, fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

// TestRequire: an unprepared harness skips a test, but fails it under
// CI=true; a prepared one is returned.
func TestRequire(t *testing.T) {
	run := func(ci string) *recorder {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Require(r)
		}()
		<-done
		return r
	}
	t.Setenv(DirEnv, filepath.Join(t.TempDir(), "nothing-here"))
	if r := run(""); r.skipped == "" || r.fatal != "" || !strings.Contains(r.skipped, PrepareCommand) {
		t.Errorf("outside CI: skipped %q, fatal %q", r.skipped, r.fatal)
	}
	if r := run("true"); r.fatal == "" || r.skipped != "" {
		t.Errorf("under CI: skipped %q, fatal %q", r.skipped, r.fatal)
	}
	t.Setenv(DirEnv, fakeHarness(t, fakeManifest))
	var got *Env
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = Require(r)
	}()
	<-done
	if got == nil || r.fatal != "" || r.skipped != "" {
		t.Errorf("prepared: env %v, skipped %q, fatal %q", got, r.skipped, r.fatal)
	}
}
