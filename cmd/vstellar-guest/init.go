//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// asInit is PID 1: set the machine up, run the work in a child, power
// off. It never returns.
func asInit(start time.Duration) int {
	con := newConsole(os.Stdout, start)
	defer func() {
		if r := recover(); r != nil {
			con.printf("PANIC in init: %v\n%s", r, debug.Stack())
		}
		powerOff(con)
	}()
	if err := mountAll(); err != nil {
		con.printf("mount: %v", err)
		return 1
	}
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		// The kernel opens the console for init only if the initramfs
		// has /dev/console; devtmpfs has it now.
		unix.Dup2(int(f.Fd()), 1)
		unix.Dup2(int(f.Fd()), 2)
		f.Close()
	}
	var uname unix.Utsname
	unix.Uname(&uname)
	con.printf("init: kernel %s, mounted proc, sysfs, devtmpfs, hugetlbfs", unix.ByteSliceToString(uname.Release[:]))
	cfg, err := configFromCmdline()
	if err != nil {
		con.printf("init: %v", err)
		return 1
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	for _, m := range modulesToLoad() {
		params := strings.TrimSpace(m.params + " " + moduleParams(string(cmdline), m.name))
		switch how, err := loadModule(m.name, params); {
		case err != nil:
			con.printf("init: module %s: %v", m.name, err)
		default:
			con.printf("init: module %s %s", m.name, how)
		}
	}
	status := runWorker(con, cfg, start)
	con.printf("init: worker exited with status %d", status)
	return status
}

// mountAll mounts what the driver needs; a mount already there is fine.
func mountAll() error {
	for _, m := range []struct{ src, dst, typ string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/dev/shm", "tmpfs"}, // POSIX shared memory (UCX's, for one)
		{"hugetlbfs", "/dev/hugepages", "hugetlbfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.typ, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("%s on %s: %w", m.typ, m.dst, err)
		}
	}
	return nil
}

// modulesFile lists the modules to load, one per line in load order, each
// with its parameters ("vstellar cmd_timeout_ms=60000").
const modulesFile = "/etc/vstellar/modules"

type module struct{ name, params string }

// modulesToLoad reads modulesFile; an image without one gets the uio
// modules that virtiopci needs.
func modulesToLoad() []module {
	b, err := os.ReadFile(modulesFile)
	if err != nil {
		return []module{{name: "uio"}, {name: "uio_pci_generic"}}
	}
	var mods []module
	for _, line := range strings.Split(string(b), "\n") {
		name, params, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name != "" && !strings.HasPrefix(name, "#") {
			mods = append(mods, module{name, strings.TrimSpace(params)})
		}
	}
	return mods
}

// moduleParams returns the parameters the kernel command line gives
// module name ("vstellar.virtio_id=21" gives "virtio_id=21"). The kernel
// applies such parameters only to built-in code; for a loadable module
// the loader (modprobe, here this program) passes them. The guest
// program's own vstellar.* parameters are not the module's.
func moduleParams(cmdline, name string) string {
	var params []string
	for _, f := range strings.Fields(cmdline) {
		k, ok := strings.CutPrefix(f, name+".")
		if !ok {
			continue
		}
		if key, _, _ := strings.Cut(k, "="); name == "vstellar" && programParams[key] {
			continue
		}
		params = append(params, k)
	}
	return strings.Join(params, " ")
}

// programParams are the vstellar.* kernel parameters parseCmdline reads.
var programParams = map[string]bool{
	"mode": true, "devid": true, "addr": true, "tty": true, "poll": true,
	"handback": true, "wait": true, "timeout": true, "ip": true,
}

// loadModule loads the module name from the first file under
// /lib/modules called name.ko, plain or compressed (the kernel
// decompresses with MODULE_INIT_COMPRESSED_FILE). A module that is
// already loaded, or built in, is fine. Parameters on the kernel command
// line (name.param=value) apply as well.
func loadModule(name, params string) (string, error) {
	if _, err := os.Stat(filepath.Join("/sys/module", name)); err == nil {
		return "already present", nil
	}
	var path string
	filepath.WalkDir("/lib/modules", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path != "" {
			return nil
		}
		base := filepath.Base(p)
		for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
			if base == name+ext {
				path = p
			}
		}
		return nil
	})
	if path == "" {
		return "", errors.New("not found under /lib/modules")
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	flags := 0
	if !strings.HasSuffix(path, ".ko") {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), params, flags); err != nil && err != unix.EEXIST {
		return "", fmt.Errorf("finit_module %s: %w", path, err)
	}
	return "loaded from " + path, nil
}

// runWorker runs this program again as the worker, reaping every child
// (PID 1 inherits orphans) until the worker exits or the timeout ends.
func runWorker(con *console, cfg config, start time.Duration) int {
	self, err := os.Executable()
	if err != nil {
		self = "/init"
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.FormatInt(int64(start), 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		con.printf("init: starting the worker: %v", err)
		return 1
	}
	pid := cmd.Process.Pid
	if cfg.timeout > 0 {
		t := time.AfterFunc(cfg.timeout, func() {
			con.printf("init: timeout %v, stopping the worker", cfg.timeout)
			unix.Kill(pid, unix.SIGKILL)
		})
		defer t.Stop()
	}
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			con.printf("init: wait: %v", err)
			return 1
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// powerOff syncs and powers the VM off. If that fails there is nothing
// left to do but sleep: PID 1 must not exit.
func powerOff(con *console) {
	con.printf("init: power off")
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	con.printf("init: power off failed: %v", err)
	for {
		time.Sleep(time.Hour)
	}
}
