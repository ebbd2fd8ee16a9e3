package realvm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// DefaultDir is where prepare.sh puts the harness unless told otherwise.
const DefaultDir = "/var/cache/vstellar/realvm"

// DirEnv names the environment variable that moves the harness (for
// prepare.sh and Load alike).
const DirEnv = "VSTELLAR_REALVM_DIR"

// The QEMUs prepare.sh provides, by manifest name.
const (
	// StockQEMU is Debian sid's QEMU 11.1.3: vhost-user shared-memory
	// regions, but no name for virtio id 42, so the device runs under the
	// stand-in id.
	StockQEMU = "qemu-11.1.3"
	// PatchedQEMU is QEMU 10.2.2 with virtio id 42 named: the device's
	// own id, no shared-memory regions (doorbells in guest RAM).
	PatchedQEMU = "qemu-10.2.2-rdma"
)

// PrepareCommand is what sets the harness up, for skip and error messages.
const PrepareCommand = "sudo internal/realvm/prepare.sh"

// Env is a prepared harness, as its manifest describes it. Paths are
// absolute.
type Env struct {
	Dir   string
	QEMUs map[string]QEMU
	// Kernel is the guest kernel with its modules.
	Kernel Kernel
	// StandinVirtioID is the virtio id the device takes under StockQEMU.
	StandinVirtioID int
	// Keys are prepare.sh's cache keys, by step.
	Keys map[string]string
	// SidRoot is the Debian sid root both QEMUs load their libraries from.
	SidRoot string
	// RDMA is the guest's RDMA user space and what builds vstellar.ko
	// and libvstellar.
	RDMA RDMA
}

// RDMA is what runs unmodified RDMA programs in a guest: rdma-core's
// tools and perftest from sid, UCX from trixie, and what builds the kernel
// driver and the provider inside the sid root.
type RDMA struct {
	// GuestRoot holds the programs and every library they load, with an
	// ld.so.cache, laid out as in the guest.
	GuestRoot string
	// RDMACore, Perftest and UCX are the Debian versions; ProviderABI is
	// rdma-core's private provider ABI (providers are
	// lib<name>-rdmav<ProviderABI>.so).
	RDMACore, ProviderABI, Perftest, UCX string
	// RDMACoreSrc, KernelHeaders and NewestKernelHeaders are paths inside
	// the sid root: rdma-core's source of the installed version, the
	// guest kernel's headers and sid's newest kernel's.
	RDMACoreSrc, KernelHeaders, NewestKernelHeaders string
	// Checkpatch is the guest kernel's scripts/checkpatch.pl, inside the
	// sid root.
	Checkpatch string
}

// QEMU is one QEMU binary and how to run it: through the sid root's
// dynamic loader, since it needs that root's glibc.
type QEMU struct {
	Name         string
	Loader       string
	LibraryPath  []string
	Binary       string
	FirmwareDirs []string
	// Version is the first line of --version.
	Version string
	// VirtioID is the id the vStellar device takes under this QEMU.
	VirtioID int
	// SharedMemory says whether it has vhost-user shared-memory regions.
	SharedMemory bool
	// BackendReconnect says whether its generic vhost-user device survives
	// a back-end reconnect (and cold-plug with reconnect-ms): stock QEMU's
	// aborts (vhost_dev_start: Assertion 'hdev->vhost_ops'); the patched
	// 10.2.2 carries qemu/0002-*.patch.
	BackendReconnect bool
}

// Kernel is the guest kernel.
type Kernel struct {
	Path string // bzImage
	// Vmlinux is the same kernel uncompressed (ELF), which QEMU boots
	// through its PVH entry point: about a second faster under TCG than
	// Path, whose decompressor runs emulated.
	Vmlinux string
	Version string // uname -r
	Package string // Debian package and version
	Config  string
	// ModulesAlias, ModulesBuiltin and ModulesBuiltinModinfo are the
	// kernel's module tables (modules.alias made by depmod).
	ModulesAlias          string
	ModulesBuiltin        string
	ModulesBuiltinModinfo string
	// Modules are the extracted modules, in load order.
	Modules []Module
}

// Module is one uncompressed kernel module.
type Module struct {
	Name string
	Path string
}

// manifest is manifest.json as prepare.sh writes it; paths are relative
// to the harness directory.
type manifest struct {
	Schema  int                     `json:"schema"`
	SidRoot string                  `json:"sid_root"`
	QEMU    map[string]manifestQEMU `json:"qemu"`
	Kernel  struct {
		Path                  string   `json:"path"`
		Vmlinux               string   `json:"vmlinux"`
		Version               string   `json:"version"`
		Package               string   `json:"package"`
		Config                string   `json:"config"`
		ModulesAlias          string   `json:"modules_alias"`
		ModulesBuiltin        string   `json:"modules_builtin"`
		ModulesBuiltinModinfo string   `json:"modules_builtin_modinfo"`
		Modules               []Module `json:"modules"`
	} `json:"kernel"`
	RDMA struct {
		GuestRoot           string `json:"guest_root"`
		RDMACore            string `json:"rdma_core"`
		ProviderABI         string `json:"provider_abi"`
		Perftest            string `json:"perftest"`
		UCX                 string `json:"ucx"`
		RDMACoreSrc         string `json:"rdma_core_src"`
		KernelHeaders       string `json:"kernel_headers"`
		NewestKernelHeaders string `json:"newest_kernel_headers"`
		Checkpatch          string `json:"checkpatch"`
	} `json:"rdma"`
	StandinVirtioID int               `json:"standin_virtio_id"`
	Keys            map[string]string `json:"keys"`
}

type manifestQEMU struct {
	Loader       string   `json:"loader"`
	LibraryPath  []string `json:"library_path"`
	Binary       string   `json:"binary"`
	FirmwareDirs []string `json:"firmware_dirs"`
	Version      string   `json:"version"`
	VirtioID     int      `json:"virtio_id"`
	SharedMemory bool     `json:"shared_memory"`
	Reconnect    bool     `json:"backend_reconnect"`
}

// HarnessDir is the harness directory: $VSTELLAR_REALVM_DIR, else
// DefaultDir.
func HarnessDir() string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	return DefaultDir
}

// Load reads dir/manifest.json and checks that every file it names exists.
func Load(dir string) (*Env, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("realvm: harness not prepared: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("realvm: %s/manifest.json: %w", dir, err)
	}
	if m.Schema != 1 {
		return nil, fmt.Errorf("realvm: %s/manifest.json has schema %d, want 1 (run prepare.sh again)", dir, m.Schema)
	}
	abs := func(p string) string { return filepath.Join(dir, p) }
	var missing []string
	need := func(p string) string {
		p = abs(p)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
		return p
	}
	e := &Env{
		Dir:             dir,
		QEMUs:           make(map[string]QEMU, len(m.QEMU)),
		StandinVirtioID: m.StandinVirtioID,
		Keys:            m.Keys,
		SidRoot:         need(m.SidRoot),
	}
	for name, q := range m.QEMU {
		v := QEMU{
			Name:             name,
			Loader:           need(q.Loader),
			Binary:           need(q.Binary),
			Version:          q.Version,
			VirtioID:         q.VirtioID,
			SharedMemory:     q.SharedMemory,
			BackendReconnect: q.Reconnect,
		}
		for _, p := range q.LibraryPath {
			v.LibraryPath = append(v.LibraryPath, need(p))
		}
		for _, p := range q.FirmwareDirs {
			v.FirmwareDirs = append(v.FirmwareDirs, need(p))
		}
		if v.VirtioID <= 0 {
			return nil, fmt.Errorf("realvm: manifest: %s has no virtio id", name)
		}
		e.QEMUs[name] = v
	}
	k := m.Kernel
	e.Kernel = Kernel{
		Path:                  need(k.Path),
		Vmlinux:               need(k.Vmlinux),
		Version:               k.Version,
		Package:               k.Package,
		Config:                need(k.Config),
		ModulesAlias:          need(k.ModulesAlias),
		ModulesBuiltin:        need(k.ModulesBuiltin),
		ModulesBuiltinModinfo: need(k.ModulesBuiltinModinfo),
	}
	for _, mod := range k.Modules {
		e.Kernel.Modules = append(e.Kernel.Modules, Module{Name: mod.Name, Path: need(mod.Path)})
	}
	r := m.RDMA
	if r.GuestRoot == "" {
		return nil, fmt.Errorf("realvm: %s/manifest.json has no rdma part (run prepare.sh again)", dir)
	}
	e.RDMA = RDMA{
		GuestRoot: need(r.GuestRoot), RDMACore: r.RDMACore, ProviderABI: r.ProviderABI, Perftest: r.Perftest, UCX: r.UCX,
		RDMACoreSrc: r.RDMACoreSrc, KernelHeaders: r.KernelHeaders, NewestKernelHeaders: r.NewestKernelHeaders,
		Checkpatch: r.Checkpatch,
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("realvm: harness in %s is incomplete, missing %s (run prepare.sh again)", dir, strings.Join(missing, ", "))
	}
	if len(e.QEMUs) == 0 || e.Kernel.Version == "" {
		return nil, fmt.Errorf("realvm: %s/manifest.json names no QEMU or no kernel", dir)
	}
	return e, nil
}

// Require returns the harness for a test. If it is not prepared the test
// is skipped with the reason and the command that prepares it; under
// CI=true it fails instead, since CI must never skip it.
func Require(t testing.TB) *Env {
	t.Helper()
	e, err := Load(HarnessDir())
	if err != nil {
		msg := fmt.Sprintf("%v; prepare it with: %s", err, PrepareCommand)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return e
}

// QEMU returns the QEMU named name (StockQEMU, PatchedQEMU).
func (e *Env) QEMU(name string) (QEMU, error) {
	q, ok := e.QEMUs[name]
	if !ok {
		return QEMU{}, fmt.Errorf("realvm: no QEMU %q in %s/manifest.json", name, e.Dir)
	}
	return q, nil
}

// QEMUNames returns the names of the QEMUs, sorted.
func (e *Env) QEMUNames() []string {
	names := make([]string, 0, len(e.QEMUs))
	for n := range e.QEMUs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Config returns a VM configuration for the named QEMU with the harness's
// kernel; the caller adds the initramfs, devices and the rest.
func (e *Env) Config(qemu string) (Config, error) {
	q, err := e.QEMU(qemu)
	if err != nil {
		return Config{}, err
	}
	return Config{QEMU: q, Kernel: e.Kernel.Path}, nil
}

// Initramfs writes to dst an initramfs holding the guest program init as
// /init, the kernel's modules as /lib/modules/NAME.ko, and extra.
func (e *Env) Initramfs(dst, init string, extra ...File) error {
	files := []File{{Name: "init", Source: init, Mode: 0o755}}
	for _, m := range e.Kernel.Modules {
		files = append(files, File{Name: "lib/modules/" + m.Name + ".ko", Source: m.Path})
	}
	return BuildInitramfs(dst, append(files, extra...))
}

// Args returns the argument list that runs the binary through the loader,
// args after the firmware directories (for exec.Command(q.Loader, ...)).
func (q QEMU) Args(args ...string) []string {
	a := []string{"--library-path", strings.Join(q.LibraryPath, ":"), q.Binary}
	for _, d := range q.FirmwareDirs {
		a = append(a, "-L", d)
	}
	return append(a, args...)
}

// Command returns an unstarted command running this QEMU with args.
func (q QEMU) Command(args ...string) *exec.Cmd {
	return exec.Command(q.Loader, q.Args(args...)...)
}

// errNoQEMU is returned by Start for a Config without a QEMU.
var errNoQEMU = errors.New("realvm: Config.QEMU is not set (use Env.Config)")
