package realvm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/internal/guestexec"
)

// ToolPort is where rc_pingpong and perftest exchange their endpoints.
const ToolPort = 18515

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

// PerftestRow returns the numbers of perftest's result row: the first
// line after the "#bytes" header that starts with numbers. For the
// bandwidth tools they are #bytes, #iterations, BW peak and BW average
// (MB/s), MsgRate (Mpps); for the latency tools #bytes, #iterations,
// t_min, t_max, t_typical, t_avg, t_stdev and percentiles (us).
func PerftestRow(out string) ([]float64, error) {
	header := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "#bytes" {
			header = true
			continue
		}
		if !header {
			continue
		}
		var row []float64
		for _, s := range f {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				break
			}
			row = append(row, v)
		}
		if len(row) >= 3 {
			return row, nil
		}
	}
	return nil, fmt.Errorf("no result row in perftest's output:\n%s", out)
}
