package realvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vstellar/vstellar/hotplug"
)

// Config describes one VM.
type Config struct {
	// QEMU runs the VM (Env.Config fills it and Kernel).
	QEMU   QEMU
	Kernel string
	// Initrd is the initramfs (BuildInitramfs, Env.Initramfs).
	Initrd string
	// Append is added to the kernel command line after
	// "console=ttyS0 panic=-1".
	Append string
	// Memory is guest RAM in bytes, a whole number of MiB (default 512
	// MiB), in a shared memfd as vhost-user needs.
	Memory int64
	// Machine is the -machine type (default q35).
	Machine string
	// Devices are cold-plugged vhost-user devices. A zero VirtioID takes
	// QEMU.VirtioID (the stand-in id under StockQEMU); a zero ID, vstN.
	Devices []hotplug.Spec
	// Args are more QEMU arguments, appended last.
	Args []string
	// AllowReboot lets a guest reboot. Without it (-no-reboot) a reboot,
	// and a kernel panic (panic=-1), ends QEMU instead.
	AllowReboot bool
	// ConsoleLog, if set, gets a copy of the console (ttyS0).
	ConsoleLog string
	// StopTimeout bounds Stop's wait for QEMU to quit before it kills it
	// (default 10s).
	StopTimeout time.Duration
	// Logger gets the VM's start and end; nil discards.
	Logger *slog.Logger
}

// DefaultMemory is a VM's RAM unless Config.Memory says otherwise.
const DefaultMemory = 512 << 20

// VM is one running QEMU. Its process is stopped when the context given
// to Start ends, by Stop or by Kill; its temporary directory (sockets) is
// removed when it has exited. In a test:
//
//	vm, err := realvm.Start(t.Context(), cfg)
//	...
//	t.Cleanup(func() { vm.Kill(); vm.Wait() })
type VM struct {
	cfg     Config
	cmd     *exec.Cmd
	dir     string
	con     *console
	stderr  *boundedBuffer
	started time.Time
	log     *slog.Logger

	done    chan struct{} // closed once QEMU has exited and its output is read
	waitErr error         // QEMU's exit, set before done closes
	stopCtx func() bool   // stops the context.AfterFunc that kills the VM
}

// socket names in the VM's directory.
const (
	qmpSock   = "qmp.sock"   // for VM.QMP callers
	ctlSock   = "ctl.sock"   // for Stop, so a caller's QMP client cannot block it
	agentSock = "agent.sock" // ttyS1, the guest agent's channel
)

// Start starts QEMU for cfg. The VM lives until ctx ends (then it is
// killed), Stop or Kill.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	if cfg.QEMU.Binary == "" {
		return nil, errNoQEMU
	}
	if cfg.Kernel == "" || cfg.Initrd == "" {
		return nil, errors.New("realvm: Config needs Kernel and Initrd")
	}
	if cfg.Memory == 0 {
		cfg.Memory = DefaultMemory
	}
	if cfg.Machine == "" {
		cfg.Machine = "q35"
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A short directory of our own: unix socket paths must fit in 107
	// bytes, which a test's TempDir may not.
	dir, err := os.MkdirTemp("", "realvm-")
	if err != nil {
		return nil, fmt.Errorf("realvm: %w", err)
	}
	var undo []func()
	fail := func(err error) (*VM, error) {
		for _, f := range slices.Backward(undo) {
			f()
		}
		os.RemoveAll(dir)
		return nil, err
	}
	args, err := cfg.args(dir)
	if err != nil {
		return fail(err)
	}
	var conLog *os.File
	if cfg.ConsoleLog != "" {
		if conLog, err = os.Create(cfg.ConsoleLog); err != nil {
			return fail(fmt.Errorf("realvm: console log: %w", err))
		}
		undo = append(undo, func() { conLog.Close() })
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("realvm: %w", err))
	}
	undo = append(undo, func() { r.Close(); w.Close() })
	vm := &VM{
		cfg:    cfg,
		dir:    dir,
		con:    newConsole(conLog),
		stderr: &boundedBuffer{max: 64 << 10},
		log:    log.With("qemu", cfg.QEMU.Name),
		done:   make(chan struct{}),
	}
	vm.cmd = cfg.QEMU.Command(args...)
	vm.cmd.Stdout = w // ttyS0 (-serial stdio)
	vm.cmd.Stderr = vm.stderr
	// If this process dies, so does QEMU.
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	vm.started = time.Now()
	if err := vm.cmd.Start(); err != nil {
		return fail(fmt.Errorf("realvm: start %s: %w", cfg.QEMU.Name, err))
	}
	w.Close()
	vm.stopCtx = context.AfterFunc(ctx, vm.Kill)
	vm.log.Info("VM started", "pid", vm.cmd.Process.Pid, "dir", dir)
	conDone := make(chan struct{})
	go func() {
		vm.con.run(r)
		r.Close()
		close(conDone)
	}()
	go func() {
		err := vm.cmd.Wait()
		<-conDone
		vm.waitErr = err
		vm.stopCtx()
		os.RemoveAll(dir)
		vm.log.Info("VM exited", "pid", vm.cmd.Process.Pid, "err", err, "after", time.Since(vm.started).Round(time.Millisecond))
		close(vm.done)
	}()
	return vm, nil
}

// args is QEMU's command line for cfg, with sockets in dir.
func (cfg Config) args(dir string) ([]string, error) {
	mem, err := hotplug.MemoryArgs(hotplug.Memory{Size: cfg.Memory})
	if err != nil {
		return nil, fmt.Errorf("realvm: %w", err)
	}
	args := []string{
		"-accel", "tcg", "-cpu", "max", "-smp", "1",
		"-machine", cfg.Machine,
		"-nodefaults", "-no-user-config", "-display", "none",
	}
	args = append(args, mem...)
	appendLine := "console=ttyS0 panic=-1"
	if cfg.Append != "" {
		appendLine += " " + cfg.Append
	}
	args = append(args,
		"-kernel", cfg.Kernel, "-initrd", cfg.Initrd, "-append", appendLine,
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-chardev", "socket,id=agent,path="+filepath.Join(dir, agentSock)+",server=on,wait=off", "-serial", "chardev:agent",
		"-qmp", "unix:"+filepath.Join(dir, qmpSock)+",server=on,wait=off",
		"-qmp", "unix:"+filepath.Join(dir, ctlSock)+",server=on,wait=off",
	)
	if !cfg.AllowReboot {
		args = append(args, "-no-reboot")
	}
	for i, d := range cfg.Devices {
		if d.VirtioID == 0 {
			d.VirtioID = cfg.QEMU.VirtioID
		}
		if d.ID == "" {
			d.ID = fmt.Sprintf("vst%d", i)
		}
		da, err := hotplug.DeviceArgs(d)
		if err != nil {
			return nil, fmt.Errorf("realvm: device %d: %w", i, err)
		}
		args = append(args, da...)
	}
	return append(args, cfg.Args...), nil
}

// Pid is QEMU's process id.
func (vm *VM) Pid() int { return vm.cmd.Process.Pid }

// Started is when QEMU was started.
func (vm *VM) Started() time.Time { return vm.started }

// Dir is the VM's temporary directory (its sockets), removed on exit.
func (vm *VM) Dir() string { return vm.dir }

// Done is closed when QEMU has exited.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// Wait waits for QEMU to exit and returns how it ended (nil for exit
// status 0).
func (vm *VM) Wait() error {
	<-vm.done
	return vm.waitErr
}

// Exited reports whether QEMU has exited, and how.
func (vm *VM) Exited() (bool, error) {
	select {
	case <-vm.done:
		return true, vm.waitErr
	default:
		return false, nil
	}
}

// Log returns everything the guest wrote to its console so far.
func (vm *VM) Log() string { return vm.con.text() }

// Stderr returns what QEMU itself wrote to stderr (its last 64 KiB).
func (vm *VM) Stderr() string { return vm.stderr.String() }

// WaitSerial waits for s on the console (ttyS0) and returns the line
// holding it. Each call searches from where the previous match ended, so
// a test can wait for the same line again after a reboot. It fails if QEMU
// exits first, with the console's last lines and QEMU's stderr.
func (vm *VM) WaitSerial(ctx context.Context, s string) (string, error) {
	line, err := vm.con.wait(ctx, s)
	if err != nil {
		return "", vm.failure(err)
	}
	return line, nil
}

// failure adds what the VM said to err.
func (vm *VM) failure(err error) error {
	exit := "running"
	if ok, werr := vm.Exited(); ok {
		exit = fmt.Sprintf("exited (%v)", werr)
		if werr == nil {
			exit = "exited (status 0)"
		}
	}
	return fmt.Errorf("realvm: %s pid %d, %s: %w\n--- console (last lines) ---\n%s\n--- qemu stderr ---\n%s",
		vm.cfg.QEMU.Name, vm.Pid(), exit, err, vm.con.tail(30), vm.Stderr())
}

// Agent connects to the guest agent's channel, the guest's ttyS1. QEMU
// serves one connection at a time; close it before dialing again.
func (vm *VM) Agent(ctx context.Context) (net.Conn, error) {
	return vm.dial(ctx, agentSock)
}

// QMP connects to the VM's QMP socket. QEMU serves one client at a time on
// it; Close the client when done. (Stop uses a socket of its own.)
func (vm *VM) QMP(ctx context.Context) (*hotplug.Client, error) {
	return vm.qmp(ctx, qmpSock)
}

func (vm *VM) qmp(ctx context.Context, sock string) (*hotplug.Client, error) {
	// The socket exists once QEMU has set its chardevs up.
	c, err := vm.dial(ctx, sock)
	if err != nil {
		return nil, err
	}
	c.Close()
	// An emulated guest booting on a busy machine can keep QEMU's main
	// loop from its QMP socket for seconds: bound by ctx, not by the
	// client's interactive defaults.
	return hotplug.Dial(ctx, filepath.Join(vm.dir, sock), hotplug.Options{
		Logger: vm.log, ConnectTimeout: qmpTimeout, CommandTimeout: qmpTimeout,
	})
}

// qmpTimeout bounds QMP's handshake and each command's reply.
const qmpTimeout = time.Minute

// dial connects to one of QEMU's server sockets, retrying while QEMU
// starts up.
func (vm *VM) dial(ctx context.Context, sock string) (net.Conn, error) {
	path := filepath.Join(vm.dir, sock)
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, vm.failure(fmt.Errorf("dial %s: %w", sock, err))
		case <-vm.done:
			return nil, vm.failure(fmt.Errorf("dial %s: QEMU exited", sock))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop asks QEMU to quit (QMP quit) and waits for it to exit; after
// Config.StopTimeout, or when ctx ends, it kills it. It returns nil if
// QEMU quit by itself or had already exited, whatever its status (see
// Wait).
func (vm *VM) Stop(ctx context.Context) error {
	if ok, _ := vm.Exited(); ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, vm.cfg.StopTimeout)
	defer cancel()
	err := vm.quit(ctx)
	if err == nil {
		select {
		case <-vm.done:
			return nil
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	}
	if ok, _ := vm.Exited(); ok {
		return nil
	}
	vm.Kill()
	<-vm.done
	return fmt.Errorf("realvm: %s pid %d did not quit, killed: %w", vm.cfg.QEMU.Name, vm.Pid(), err)
}

func (vm *VM) quit(ctx context.Context) error {
	c, err := vm.qmp(ctx, ctlSock)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Execute(ctx, "quit", nil); err != nil {
		// QEMU may close the connection as it exits, before its reply.
		select {
		case <-vm.done:
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
			return err
		}
	}
	return nil
}

// Kill kills QEMU with SIGKILL (by its pid) if it is still running, and
// does not wait.
func (vm *VM) Kill() {
	if ok, _ := vm.Exited(); ok {
		return
	}
	// os.Process signals through its pidfd, so a QEMU that exited
	// meanwhile is never mistaken for a new process with its pid.
	if err := vm.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		vm.log.Warn("kill failed", "pid", vm.Pid(), "err", err)
	}
}

// boundedBuffer keeps the last max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if over := len(b.b) - b.max; over > 0 {
		b.b = append(b.b[:0], b.b[over:]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.TrimSpace(b.b))
}

// Pause stops the VM's vCPUs (QMP stop: for the generic vhost-user
// device, its rings stop too) for d, then lets it run again (cont).
func (vm *VM) Pause(ctx context.Context, d time.Duration) error {
	q, err := vm.QMP(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	if _, err := q.Execute(ctx, "stop", nil); err != nil {
		return err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	_, err = q.Execute(context.WithoutCancel(ctx), "cont", nil)
	return err
}
