// Command rdmavm boots two real VMs (exec mode: vstellar.ko, libvstellar,
// rdma-core's tools and perftest) on one in-process vstellard, with a
// point-to-point network between them (a is 10.0.0.1, b is 10.0.0.2), and
// runs the given steps in them: a development aid for the guest driver
// and provider. Run as root after internal/realvm/prepare.sh:
//
//	go run ./internal/realvm/rdmavm [-qemu NAME] STEP...
//
// A step is "a:COMMAND" or "b:..." (a shell command line, run with sh -c;
// wait for it), "a&:..." (start it in the background; waited for at the
// end), or "sleep:SECONDS". Each
// step's output is printed with its exit status; -console prints both
// consoles at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/guestexec"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

func main() {
	qemu := flag.String("qemu", realvm.StockQEMU, "QEMU of the harness to run the VMs")
	console := flag.Bool("console", false, "print both VMs' consoles at the end")
	timeout := flag.Duration("timeout", 2*time.Minute, "limit of each step")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *qemu, *timeout, *console, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "rdmavm:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, qemu string, timeout time.Duration, console bool, steps []string) error {
	// One run at a time: two pairs of emulated VMs on a small machine
	// would only slow each other down.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "rdmavm.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		fmt.Println("== waiting for another rdmavm to finish")
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			return err
		}
	}
	env, err := realvm.Load(realvm.HarnessDir())
	if err != nil {
		return err
	}
	repo, err := realvm.RepoRoot()
	if err != nil {
		return err
	}
	t0 := time.Now()
	b, err := env.BuildRDMA(ctx, repo)
	if err != nil {
		return err
	}
	fmt.Printf("== built vstellar.ko and libvstellar in %v (cached %v)\n", time.Since(t0).Round(time.Millisecond), b.Cached)
	dir, err := os.MkdirTemp("", "rdmavm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	initrd, err := env.BuildExecImage(ctx, dir, b)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := hostsim.New(ctx, hostsim.Options{Log: log})
	if err != nil {
		return err
	}
	defer h.Close()
	var devs [2]hotplug.Spec
	for i, name := range []string{"a", "b"} {
		if devs[i].Socket, err = h.CreateDevice(ctx, name, hostsim.VMOptions{}); err != nil {
			return err
		}
	}
	pair, err := env.BootExecPair(ctx, qemu, initrd, dir, devs, nil)
	if err != nil {
		return err
	}
	guests := map[string]*realvm.ExecGuest{"a": pair[0], "b": pair[1]}
	for _, name := range []string{"a", "b"} {
		g := guests[name]
		fmt.Printf("== VM %s (%s) ready in %v\n", name, g.Addr, g.Ready.Round(time.Millisecond))
		defer func() {
			if console {
				fmt.Printf("== console of %s\n%s\n", name, g.VM.Log())
			}
			g.Close(context.WithoutCancel(ctx))
		}()
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	for _, s := range steps {
		where, cmdline, ok := strings.Cut(s, ":")
		if !ok {
			return fmt.Errorf("step %q: want VM:PROGRAM ARGS", s)
		}
		if where == "sleep" {
			secs, err := strconv.ParseFloat(cmdline, 64)
			if err != nil {
				return fmt.Errorf("step %q: %w", s, err)
			}
			time.Sleep(time.Duration(secs * float64(time.Second)))
			continue
		}
		background := strings.HasSuffix(where, "&")
		g := guests[strings.TrimSuffix(where, "&")]
		if g == nil || strings.TrimSpace(cmdline) == "" {
			return fmt.Errorf("step %q: want a: or b: and a program", s)
		}
		do := func() {
			rep, err := g.Exec.Run(ctx, guestexec.RunArgs{Path: "sh", Args: []string{"-c", cmdline}, TimeoutMs: int(timeout.Milliseconds())})
			status := "ok"
			if err != nil {
				status = err.Error()
			} else if e := rep.Err(); e != nil {
				status = e.Error()
			}
			fmt.Printf("== %s: %s  [%s, %.1f s]\n%s", where, cmdline, status, float64(rep.Micros)/1e6, indent(rep.Output()))
		}
		if background {
			bg.Add(1)
			go func() { defer bg.Done(); do() }()
			continue
		}
		do()
	}
	return nil
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n   ") + "\n"
}
