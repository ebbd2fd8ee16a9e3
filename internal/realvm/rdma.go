package realvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/guestexec"
)

// RDMABuild is the guest side for unmodified RDMA programs, built from
// the repository: the kernel driver and the rdma-core provider.
type RDMABuild struct {
	Module     string // vstellar.ko
	Provider   string // libvstellar-rdmav<N>.so
	DriverFile string // vstellar.driver, for /etc/libibverbs.d
	// Tools are the test programs of guest-driver/tools, built against
	// libibverbs, for the guest's /usr/bin.
	Tools []string
	// Cached says the build came from the harness's cache.
	Cached bool
}

// rdmaSources are the repository's directories the build reads.
var rdmaSources = []string{"guest-driver/include", "guest-driver/linux", "guest-driver/rdma-core", "guest-driver/tools"}

// BuildRDMA builds vstellar.ko and libvstellar from the repository at
// repo inside the sid root (build-rdma.sh), or takes them from the
// harness's cache (DIR/rdma-build) when the sources are unchanged. It
// needs root, like prepare.sh.
func (e *Env) BuildRDMA(ctx context.Context, repo string) (RDMABuild, error) {
	h := sha256.New()
	fmt.Fprintln(h, e.Keys["rdma"], e.Kernel.Version, e.RDMA.RDMACore)
	script, err := os.ReadFile(filepath.Join(repo, "internal/realvm/build-rdma.sh"))
	if err != nil {
		return RDMABuild{}, fmt.Errorf("realvm: %w", err)
	}
	h.Write(script)
	for _, d := range rdmaSources {
		err := filepath.WalkDir(filepath.Join(repo, d), func(p string, de fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == filepath.Join(repo, d) {
				return nil // no test programs
			}
			if err != nil || !de.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %d\n", strings.TrimPrefix(p, repo), len(b))
			h.Write(b)
			return nil
		})
		if err != nil {
			return RDMABuild{}, fmt.Errorf("realvm: guest driver sources: %w", err)
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	cache := filepath.Join(e.Dir, "rdma-build")
	out := filepath.Join(cache, sum)
	b := RDMABuild{
		Module:     filepath.Join(out, "vstellar.ko"),
		Provider:   filepath.Join(out, "libvstellar-rdmav"+e.RDMA.ProviderABI+".so"),
		DriverFile: filepath.Join(out, "vstellar.driver"),
	}
	if b.complete() {
		b.Cached = true
		return b, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return RDMABuild{}, fmt.Errorf("realvm: %w", err)
	}
	// Test packages run in parallel and build the same sources: the
	// first builds, the others wait and take its build.
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return RDMABuild{}, fmt.Errorf("realvm: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return RDMABuild{}, fmt.Errorf("realvm: locking %s: %w", cache, err)
	}
	if b.complete() {
		b.Cached = true
		return b, nil
	}
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return RDMABuild{}, fmt.Errorf("realvm: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "internal/realvm/build-rdma.sh"),
		e.SidRoot, repo, tmp, e.RDMA.KernelHeaders, e.RDMA.RDMACoreSrc)
	if o, err := cmd.CombinedOutput(); err != nil {
		return RDMABuild{}, fmt.Errorf("realvm: building vstellar.ko and libvstellar: %v\n%s", err, o)
	}
	// Builds of other sources go once a day old: one may still be in use.
	if old, err := filepath.Glob(filepath.Join(cache, "[0-9a-f]*")); err == nil {
		for _, o := range old {
			if st, err := os.Stat(o); err == nil && time.Since(st.ModTime()) > 24*time.Hour {
				os.RemoveAll(o)
			}
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		return RDMABuild{}, fmt.Errorf("realvm: %w", err)
	}
	if !b.complete() {
		return RDMABuild{}, fmt.Errorf("realvm: the build in %s lacks vstellar.ko, %s or vstellar.driver", out, filepath.Base(b.Provider))
	}
	return b, nil
}

// complete says whether the build's files exist, and finds its tools.
func (b *RDMABuild) complete() bool {
	for _, p := range []string{b.Module, b.Provider, b.DriverFile} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	b.Tools, _ = filepath.Glob(filepath.Join(filepath.Dir(b.Module), "bin", "*"))
	return true
}

// InRoot runs the bash script in the sid root (chrooted, in private
// mount and pid namespaces, so nothing stays mounted or running) with the
// directory src bind-mounted read-only at /srv/src, and returns its
// combined output. It needs root.
func (e *Env) InRoot(ctx context.Context, src, script string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--",
		"/bin/bash", "-euo", "pipefail", "-c", `
			r=$1
			mount -t proc proc "$r/proc"
			mount --rbind /dev "$r/dev"
			mount -t sysfs sysfs "$r/sys"
			mkdir -p "$r/srv/src"
			mount --bind -o ro "$2" "$r/srv/src"
			exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 /bin/bash -euo pipefail -c "$3"`,
		"inroot", e.SidRoot, src, script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("realvm: in the sid root: %w", err)
	}
	return out, nil
}

// RepoRoot is the root of the repository holding the working directory
// (where go.mod is), for BuildRDMA.
func RepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("realvm: no go.mod above the working directory")
		}
		d = parent
	}
}

// execModules are the modules an exec-mode guest loads, in order: the NIC
// for the tools' TCP, the RDMA core, rxe (the comparison; it needs
// crc32_generic, which nothing loads on demand in the guest) and the
// driver.
var execModules = []string{"failover", "net_failover", "virtio_net", "ib_core", "ib_uverbs", "udp_tunnel", "ip6_udp_tunnel", "crc32_generic", "rdma_rxe", "vstellar"}

// BuildExecImage builds the guest program and packs it (as /init, mode
// exec) into dir/initrd-exec.cpio, whose path it returns, with the
// kernel's modules, vstellar.ko, the RDMA user space of the harness
// (rdma-core's tools, perftest) and libvstellar registered with
// libibverbs.
func (e *Env) BuildExecImage(ctx context.Context, dir string, b RDMABuild) (string, error) {
	bin, err := buildGuestProgram(ctx, dir)
	if err != nil {
		return "", err
	}
	files := []File{
		{Name: "lib/modules/vstellar.ko", Source: b.Module},
		{Name: "etc/vstellar/modules", Data: []byte(strings.Join(execModules, "\n") + "\n")},
		{Name: "usr/lib/x86_64-linux-gnu/libibverbs/" + filepath.Base(b.Provider), Source: b.Provider},
		{Name: "etc/libibverbs.d/vstellar.driver", Source: b.DriverFile},
		{Name: "tmp", Mode: fs.ModeDir | 0o1777},
	}
	for _, p := range b.Tools {
		files = append(files, File{Name: "usr/bin/" + filepath.Base(p), Source: p, Mode: 0o755})
	}
	root := e.RDMA.GuestRoot
	err = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		if !de.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		rel, _ := filepath.Rel(root, p)
		files = append(files, File{Name: rel, Source: p})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("realvm: guest root: %w", err)
	}
	initrd := filepath.Join(dir, "initrd-exec.cpio")
	if err := e.Initramfs(initrd, bin, files...); err != nil {
		return "", err
	}
	return initrd, nil
}

// ExecGuestConfig is a VM on the named QEMU booting initrd
// (BuildExecImage) in exec mode, with 1 GiB of RAM, its first NIC at
// addr ("10.0.0.1/24") and devs cold-plugged. Under a QEMU that runs the
// device under a stand-in id, the driver is told that id. The caller adds
// the NIC (LinkArgs) and may adjust the rest.
func (e *Env) ExecGuestConfig(qemu, initrd, addr string, devs ...hotplug.Spec) (Config, error) {
	cfg, err := e.Config(qemu)
	if err != nil {
		return Config{}, err
	}
	cfg.Initrd = initrd
	cfg.Memory = 1 << 30
	cfg.Devices = devs
	cfg.Append = "vstellar.mode=exec vstellar.ip=" + addr
	if cfg.QEMU.VirtioID != 42 {
		cfg.Append += fmt.Sprintf(" vstellar.virtio_id=%d", cfg.QEMU.VirtioID)
	}
	return cfg, nil
}

// LinkArgs returns the QEMU arguments for a virtio-net NIC with the given
// MAC on a point-to-point Ethernet link over the unix socket path, which
// two VMs share: the one with listen set listens, the other connects and
// retries until it can.
func LinkArgs(path string, listen bool, mac string) []string {
	nd := "stream,id=link0,addr.type=unix,addr.path=" + path
	if listen {
		nd += ",server=on"
	} else {
		nd += ",server=off,reconnect-ms=100"
	}
	return []string{"-netdev", nd, "-device", "virtio-net-pci,netdev=link0,mac=" + mac}
}

// ExecGuest is a running VM in exec mode and its client.
type ExecGuest struct {
	VM   *VM
	Exec *guestexec.Client
	// Addr is its IPv4 address on its link, if BootExecPair set it.
	Addr string
	// Ready is from QEMU's start to the first answer.
	Ready time.Duration
}

// BootExecGuest starts cfg (ExecGuestConfig) and waits, within ctx, until
// the guest runs programs. On error the VM is killed already.
func BootExecGuest(ctx context.Context, cfg Config) (*ExecGuest, error) {
	vm, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c, err := DialExec(ctx, vm)
	if err != nil {
		vm.Kill()
		vm.Wait()
		return nil, err
	}
	return &ExecGuest{VM: vm, Exec: c, Ready: time.Since(vm.Started())}, nil
}

// PairAddrs are the addresses of BootExecPair's guests on their link.
var PairAddrs = [2]string{"10.0.0.1", "10.0.0.2"}

// BootExecPair boots two exec-mode VMs on qemu (ExecGuestConfig), the
// first with devs[0] at PairAddrs[0], the second with devs[1] at
// PairAddrs[1], joined by a virtio-net link through a socket in dir.
// adjust, if set, changes each configuration before its VM starts. The
// VMs live until ctx ends or they are closed; on error none is left.
func (e *Env) BootExecPair(ctx context.Context, qemu, initrd, dir string, devs [2]hotplug.Spec, adjust func(i int, cfg *Config)) ([2]*ExecGuest, error) {
	var gs [2]*ExecGuest
	link := filepath.Join(dir, "link.sock")
	for i := range gs {
		cfg, err := e.ExecGuestConfig(qemu, initrd, PairAddrs[i]+"/24", devs[i])
		if err != nil {
			return gs, err
		}
		cfg.Args = append(cfg.Args, LinkArgs(link, i == 0, fmt.Sprintf("52:54:00:00:00:%02x", i+1))...)
		if adjust != nil {
			adjust(i, &cfg)
		}
		g, err := BootExecGuest(ctx, cfg)
		if err != nil {
			if i == 1 {
				gs[0].VM.Kill()
				gs[0].VM.Wait()
			}
			return [2]*ExecGuest{}, fmt.Errorf("VM %d: %w", i+1, err)
		}
		g.Addr = PairAddrs[i]
		gs[i] = g
	}
	return gs, nil
}

// Run runs a program in the guest (see guestexec.RunArgs).
func (g *ExecGuest) Run(ctx context.Context, timeout time.Duration, path string, args ...string) (guestexec.RunReply, error) {
	return g.Exec.Run(ctx, guestexec.RunArgs{Path: path, Args: args, TimeoutMs: int(timeout.Milliseconds())})
}

// Close closes the client and stops the VM.
func (g *ExecGuest) Close(ctx context.Context) error {
	return errors.Join(g.Exec.Close(), g.VM.Stop(ctx))
}

// DialExec waits for an exec-mode guest to serve, connects to it and
// waits for its first answer.
func DialExec(ctx context.Context, vm *VM) (*guestexec.Client, error) {
	if _, err := vm.WaitSerial(ctx, AgentServing); err != nil {
		return nil, fmt.Errorf("guest did not start serving: %w", err)
	}
	conn, err := vm.Agent(ctx)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	c := guestexec.NewClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Ping(cctx)
		cancel()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			c.Close()
			return nil, vm.failure(fmt.Errorf("guest never answered: %w", err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
