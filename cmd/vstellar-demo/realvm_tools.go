package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/realvm"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
)

// toolRun is one unmodified program pair's outcome.
type toolRun struct {
	QEMU    string  `json:"qemu"`
	Command string  `json:"command"`
	Result  string  `json:"result"` // the client's result line
	Value   float64 `json:"value,omitempty"`
	Unit    string  `json:"unit,omitempty"`
}

// runRealVMTools is --real-vm --rdma-tools: it builds vstellar.ko and
// libvstellar, boots two real VMs whose kernel drives the device under
// each QEMU the harness prepared, and runs ibv_rc_pingpong, ib_write_bw
// and ucx_perftest (UCX's rc_verbs) between them, unmodified, over
// libibverbs.
func runRealVMTools(ctx context.Context, o options, stdout, stderr io.Writer) error {
	env, out, log, dir, err := realVMSetup(o, stdout, stderr)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	repo, err := realvm.RepoRoot()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "building vstellar.ko (kernel %s) and libvstellar (rdma-core %s)\n", env.Kernel.Version, env.RDMA.RDMACore)
	b, err := env.BuildRDMA(ctx, repo)
	if err != nil {
		return err
	}
	initrd, err := env.BuildExecImage(ctx, dir, b)
	if err != nil {
		return err
	}
	var runs []toolRun
	for _, q := range env.QEMUNames() {
		r, err := toolPair(ctx, env, q, initrd, dir, log, out)
		runs = append(runs, r...)
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if o.json {
		j, _ := json.MarshalIndent(runs, "", "  ")
		fmt.Fprintln(stdout, string(j))
	}
	return nil
}

func toolPair(ctx context.Context, env *realvm.Env, qemu, initrd, dir string, log *slog.Logger, out io.Writer) ([]toolRun, error) {
	q, err := env.QEMU(qemu)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n%s (%s), guest kernel %s, accel tcg\n", qemu, q.Version, env.Kernel.Version)
	host, err := hostsim.New(ctx, hostsim.Options{Log: log})
	if err != nil {
		return nil, err
	}
	defer host.Close()
	var devs [2]hotplug.Spec
	for i, name := range []string{"vm1", "vm2"} {
		if devs[i].Socket, err = host.CreateDevice(ctx, name, hostsim.VMOptions{}); err != nil {
			return nil, err
		}
	}
	vmDir, err := os.MkdirTemp(dir, qemu+"-")
	if err != nil {
		return nil, err
	}
	gs, err := env.BootExecPair(ctx, qemu, initrd, vmDir, devs, func(i int, cfg *realvm.Config) {
		cfg.Logger = log.With("vm", fmt.Sprintf("vm%d", i+1))
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, g := range gs {
			g.Close(context.WithoutCancel(ctx))
		}
	}()
	for i, g := range gs {
		fmt.Fprintf(out, "  vm%d: %s, kernel driver up, answering %.0f ms after QEMU start\n", i+1, g.Addr, ms(g.Ready))
	}
	var runs []toolRun
	for _, cmd := range []string{
		"ibv_rc_pingpong -d vstellar0 -g 0 -n 100",
		"ib_write_bw -d vstellar0 -x 0 -s 65536 -n 200",
		realvm.UCXPerftest("-x rc_verbs -d vstellar0:1 -t am_bw -D bcopy -s 4096 -n 1000"),
	} {
		s, c, err := realvm.ServerClient(ctx, gs[0], gs[1], cmd, cmd, 2*time.Minute)
		if err == nil {
			err = s.Err()
		}
		if err == nil {
			err = c.Err()
		}
		if err != nil {
			return runs, fmt.Errorf("%s: %w\nserver:\n%s\nclient:\n%s", cmd, err, s.Output(), c.Output())
		}
		r := toolRun{QEMU: qemu, Command: cmd}
		if cols, err := realvm.PerftestColumns(c.Stdout); err == nil {
			r.Value, r.Unit = cols["BW average[MiB/sec]"], "MiB/s"
			r.Result = fmt.Sprintf("%.0f bytes x %.0f: %.2f MiB/s average", cols["#bytes"], cols["#iterations"], r.Value)
		} else if u, err := realvm.UCXPerftestFinal(c.Stdout); err == nil {
			r.Value, r.Unit = u.MsgRate, "msg/s"
			r.Result = fmt.Sprintf("%d messages: %.0f msg/s, %.2f MB/s", u.Iterations, u.MsgRate, u.MBps)
		} else {
			r.Result = lastLine(c.Output())
		}
		fmt.Fprintf(out, "  %s\n    %s\n", cmd, r.Result)
		runs = append(runs, r)
	}
	return runs, nil
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}
