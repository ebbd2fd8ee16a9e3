package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// realVMResult is one QEMU's run of the real-VM demo.
type realVMResult struct {
	QEMU    string        `json:"qemu"`
	Version string        `json:"qemu_version"`
	Kernel  string        `json:"guest_kernel"`
	Accel   string        `json:"accel"`
	ReadyMs []float64     `json:"ready_ms"` // QEMU start to the agent's first answer, per VM
	Report  *agent.Report `json:"report"`
}

// runRealVMs is --real-vm: the verbs between two real VMs (QEMU, Linux,
// the guest program as /init) on an in-process vstellard, under each
// QEMU the harness (internal/realvm/prepare.sh) prepared.
func runRealVMs(ctx context.Context, o options, stdout, stderr io.Writer) error {
	env, out, log, dir, err := realVMSetup(o, stdout, stderr)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(out, "building the guest program and its initramfs (kernel %s)\n", env.Kernel.Version)
	initrd, err := env.BuildGuestImage(ctx, dir)
	if err != nil {
		return err
	}
	var results []realVMResult
	for _, q := range env.QEMUNames() {
		r, err := realVMPair(ctx, env, q, initrd, log, out)
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		results = append(results, r)
	}
	if o.json {
		b, _ := json.MarshalIndent(results, "", "  ")
		fmt.Fprintln(stdout, string(b))
	}
	for _, r := range results {
		if err := r.Report.Err(); err != nil {
			return fmt.Errorf("%s: %w", r.QEMU, err)
		}
	}
	return nil
}

// realVMSetup is what both real-VM modes start with: the harness, the
// writer for progress (io.Discard with --json), the logger and a
// temporary directory, which the caller removes.
func realVMSetup(o options, stdout, stderr io.Writer) (env *realvm.Env, out io.Writer, log *slog.Logger, dir string, err error) {
	env, err = realvm.Load(realvm.HarnessDir())
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("%w (prepare it with: %s)", err, realvm.PrepareCommand)
	}
	out = stdout
	if o.json {
		out = io.Discard
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	dir, err = os.MkdirTemp("", "vstellar-demo-")
	if err != nil {
		return nil, nil, nil, "", err
	}
	return env, out, log, dir, nil
}

func realVMPair(ctx context.Context, env *realvm.Env, qemu, initrd string, log *slog.Logger, out io.Writer) (realVMResult, error) {
	q, err := env.QEMU(qemu)
	if err != nil {
		return realVMResult{}, err
	}
	res := realVMResult{QEMU: qemu, Version: q.Version, Kernel: env.Kernel.Version, Accel: "tcg"}
	fmt.Fprintf(out, "\n%s (%s), guest kernel %s, accel tcg\n", qemu, q.Version, env.Kernel.Version)
	host, err := hostsim.New(ctx, hostsim.Options{Log: log})
	if err != nil {
		return res, err
	}
	defer host.Close()
	var guests []*realvm.Guest
	defer func() {
		for _, g := range guests {
			g.Close(context.WithoutCancel(ctx))
		}
	}()
	for _, name := range []string{"vm1", "vm2"} {
		socket, err := host.CreateDevice(ctx, name, hostsim.VMOptions{})
		if err != nil {
			return res, err
		}
		cfg, err := env.GuestConfig(qemu, initrd, hotplug.Spec{Socket: socket})
		if err != nil {
			return res, err
		}
		cfg.Logger = log.With("vm", name)
		// The VM lives as long as the context BootGuest gets.
		g, err := realvm.BootGuest(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		guests = append(guests, g)
		res.ReadyMs = append(res.ReadyMs, ms(g.Ready))
		fmt.Fprintf(out, "  %s: pid %d, device %s, doorbells %s, agent up %.0f ms after QEMU start (device ready %.0f ms after the guest program started)\n",
			name, g.VM.Pid(), socket, g.Info.DoorbellMode, ms(g.Ready), g.Info.ReadyMicros/1e3)
	}
	target := guests[1]
	rep, err := agent.RunVerbs(ctx, guests[0].Agent, target.Agent, agent.RunOptions{
		Strict: true,
		Pause:  func(ctx context.Context) error { return target.VM.Pause(ctx, 200*time.Millisecond) },
	})
	res.Report = rep
	if rep != nil {
		rep.WriteTable(out)
	}
	return res, err
}
