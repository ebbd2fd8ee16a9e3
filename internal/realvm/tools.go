package realvm

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/internal/guestexec"
)

// ToolPort is where rc_pingpong, perftest and ucx_perftest exchange their
// endpoints.
const ToolPort = 18515

// UCXPerftest is the command line of ucx_perftest with args, exchanging
// endpoints on ToolPort (a client appends the server's address). Its
// standard input is a terminal because ucx_perftest calls MPI_Init when it
// is not, and Open MPI's singleton then opens the device for its own UCX
// (with UD, which the device lacks) and puts the test in MPI mode.
func UCXPerftest(args string) string {
	return fmt.Sprintf("ucx_perftest -p %d %s </dev/tty1", ToolPort, args)
}

// UCXResult is ucx_perftest's "Final:" row.
type UCXResult struct {
	Iterations int
	// Latency (latency tests) or send overhead (bandwidth tests) in
	// microseconds: the median, the average of the last report
	// interval and the average over the run.
	Median, Average, Overall float64
	// MBps and MsgRate are over the whole run, in MB/s and messages/s.
	MBps, MsgRate float64
}

// UCXPerftestFinal reads ucx_perftest's final row: "Final:", the
// iterations, then the three latency or overhead figures, bandwidth
// (average, overall) and message rate (average, overall).
func UCXPerftestFinal(out string) (UCXResult, error) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Final:" {
			continue
		}
		if len(f) != 9 {
			return UCXResult{}, fmt.Errorf("ucx_perftest's final row %q has %d fields, want 9", strings.TrimSpace(l), len(f))
		}
		var v [8]float64
		for i, w := range f[1:] {
			x, err := strconv.ParseFloat(w, 64)
			if err != nil {
				return UCXResult{}, fmt.Errorf("ucx_perftest's final row %q: %w", strings.TrimSpace(l), err)
			}
			v[i] = x
		}
		return UCXResult{Iterations: int(v[0]), Median: v[1], Average: v[2], Overall: v[3], MBps: v[5], MsgRate: v[7]}, nil
	}
	return UCXResult{}, fmt.Errorf("no final row in ucx_perftest's output:\n%s", strings.TrimSpace(out))
}

// ServerClient runs the shell command line server in srv and, once
// something in srv listens on ToolPort, client followed by srv.Addr in
// cli, each within limit. It returns how both ended; err is
// for a run that could not be made (a broken connection, a server that
// ended or never listened), not for a program that failed (RunReply.Err).
func ServerClient(ctx context.Context, srv, cli *ExecGuest, server, client string, limit time.Duration) (s, c guestexec.RunReply, err error) {
	done := make(chan guestexec.RunReply, 1)
	go func() {
		rep, err := srv.Exec.Run(ctx, shell(server, limit))
		if err != nil {
			rep.StartError, rep.ExitCode = err.Error(), -1
		}
		done <- rep
	}()
	if err := waitListen(ctx, srv, ToolPort, done); err != nil {
		return s, c, fmt.Errorf("%s: %w", server, err)
	}
	c, err = cli.Exec.Run(ctx, shell(client+" "+srv.Addr, limit))
	s = <-done
	if err != nil {
		return s, c, fmt.Errorf("%s: %w", client, err)
	}
	return s, c, nil
}

func shell(cmdline string, limit time.Duration) guestexec.RunArgs {
	return guestexec.RunArgs{Path: "sh", Args: []string{"-c", cmdline}, TimeoutMs: int(limit.Milliseconds())}
}

// waitListen waits until something in g listens on TCP port, or the
// server ended (done) first.
func waitListen(ctx context.Context, g *ExecGuest, port int, done chan guestexec.RunReply) error {
	want := fmt.Sprintf(":%04X", port)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		select {
		case rep := <-done:
			done <- rep
			return fmt.Errorf("ended before it listened: %v\n%s", rep.Err(), rep.Output())
		default:
		}
		rep, err := g.Exec.Run(ctx, shell("cat /proc/net/tcp /proc/net/tcp6", 10*time.Second))
		if err != nil {
			return err
		}
		for _, l := range strings.Split(rep.Stdout, "\n") {
			// sl local_address rem_address st ...; st 0A is LISTEN.
			f := strings.Fields(l)
			if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				return nil
			}
		}
	}
	return fmt.Errorf("nothing listens on port %d after a minute", port)
}

// PerftestColumns reads perftest's result table: the "#bytes" header
// line and the first line of numbers after it, as column name -> value.
// Names run to a closing bracket ("BW average[MiB/sec]", "99%
// percentile[usec]") or are a single word starting with '#'. perftest
// prints C's "-nan" where a figure is undefined (t_stdev after a huge
// outlier): it is NaN here, for a caller that uses the figure to reject.
func PerftestColumns(out string) (map[string]float64, error) {
	var names []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if f[0] == "#bytes" {
			names = names[:0]
			cur := ""
			for _, w := range f {
				if cur != "" {
					cur += " "
				}
				cur += w
				if strings.HasPrefix(cur, "#") || strings.HasSuffix(cur, "]") {
					names = append(names, cur)
					cur = ""
				}
			}
			if cur != "" {
				return nil, fmt.Errorf("perftest's header %q: column %q has no unit", strings.TrimSpace(l), cur)
			}
			continue
		}
		if names == nil {
			continue
		}
		vals := make([]float64, 0, len(f))
		for _, w := range f {
			v, err := strconv.ParseFloat(w, 64)
			if w == "-nan" {
				v, err = math.NaN(), nil
			}
			if err != nil {
				break
			}
			vals = append(vals, v)
		}
		if len(vals) == 0 {
			continue
		}
		if len(vals) != len(names) {
			return nil, fmt.Errorf("perftest's result row %q has %d numbers for %d columns %q", strings.TrimSpace(l), len(vals), len(names), names)
		}
		cols := make(map[string]float64, len(names))
		for i, n := range names {
			cols[n] = vals[i]
		}
		return cols, nil
	}
	return nil, fmt.Errorf("no result table in perftest's output:\n%s", strings.TrimSpace(out))
}
