package guestexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// RunArgs is one program to run.
type RunArgs struct {
	// Path is the program (looked up in PATH if it has no slash) and Args
	// its arguments, without argv[0].
	Path string
	Args []string
	// Env is added to the server's base environment (Server.Env).
	Env []string
	// Stdin is the program's standard input.
	Stdin []byte
	// TimeoutMs bounds the run; the program is killed after it. Zero
	// means DefaultTimeout, and MaxTimeout is the most.
	TimeoutMs int
}

// RunReply is how the program ended.
type RunReply struct {
	Stdout, Stderr string
	// ExitCode is the exit status, or -1 if a signal ended the program
	// (Signal names it) or it could not start (StartError says why).
	ExitCode   int
	Signal     string
	StartError string
	TimedOut   bool
	Micros     int64 // wall time of the run
}

// Output is stdout followed by stderr, for messages.
func (r RunReply) Output() string { return r.Stdout + r.Stderr }

// Err describes a run that did not exit with status 0, or nil.
func (r RunReply) Err() error {
	switch {
	case r.StartError != "":
		return fmt.Errorf("did not start: %s", r.StartError)
	case r.TimedOut:
		return fmt.Errorf("killed after its time limit (%v)", time.Duration(r.Micros)*time.Microsecond)
	case r.Signal != "":
		return fmt.Errorf("killed by %s", r.Signal)
	case r.ExitCode != 0:
		return fmt.Errorf("exit status %d", r.ExitCode)
	}
	return nil
}

// Limits of a run.
const (
	DefaultTimeout = 2 * time.Minute
	MaxTimeout     = 30 * time.Minute
	// MaxOutput is what is kept of each of stdout and stderr; the rest
	// is dropped and marked.
	MaxOutput = 1 << 20
)

// Server runs programs for a Client.
type Server struct {
	// Env is every program's base environment.
	Env []string
	Log *slog.Logger
}

const rpcName = "Exec"

// Serve answers calls on conn until it fails or ctx ends, and closes it.
func (s *Server) Serve(ctx context.Context, conn io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := rpc.NewServer()
	if err := srv.RegisterName(rpcName, &rpcExec{s: s, ctx: ctx}); err != nil {
		conn.Close()
		return fmt.Errorf("guestexec: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	srv.ServeCodec(jsonrpc.NewServerCodec(conn))
	return context.Cause(ctx)
}

type rpcExec struct {
	s   *Server
	ctx context.Context
}

// Empty is an argument or reply with nothing in it.
type Empty struct{}

// Ping answers at once, with the kernel's release.
func (r *rpcExec) Ping(_ *Empty, out *string) error {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	*out = strings.TrimSpace(string(b))
	return err
}

func (r *rpcExec) Run(a *RunArgs, out *RunReply) error {
	rep, err := r.s.run(r.ctx, *a)
	*out = rep
	return err
}

func (s *Server) run(ctx context.Context, a RunArgs) (RunReply, error) {
	if a.Path == "" {
		return RunReply{}, errors.New("no program")
	}
	limit := DefaultTimeout
	if a.TimeoutMs < 0 || time.Duration(a.TimeoutMs)*time.Millisecond > MaxTimeout {
		return RunReply{}, fmt.Errorf("time limit of %d ms: want 0 to %v", a.TimeoutMs, MaxTimeout)
	}
	if a.TimeoutMs > 0 {
		limit = time.Duration(a.TimeoutMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	env := append(append([]string{}, s.Env...), a.Env...)
	cmd := exec.CommandContext(ctx, lookPath(a.Path, env), a.Args...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(a.Stdin)
	var stdout, stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	rep := RunReply{Stdout: stdout.String(), Stderr: stderr.String(), Micros: time.Since(start).Microseconds()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		rep.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			rep.Signal = ws.Signal().String()
		}
	default:
		rep.ExitCode, rep.StartError = -1, err.Error()
	}
	rep.TimedOut = ctx.Err() == context.DeadlineExceeded
	if s.Log != nil {
		s.Log.Info("ran", "program", a.Path, "args", a.Args, "exit", rep.ExitCode, "signal", rep.Signal, "ms", rep.Micros/1000)
	}
	return rep, nil
}

// lookPath finds a program without a slash in the PATH of env (the last
// one set), not in the server's own environment.
func lookPath(prog string, env []string) string {
	if strings.Contains(prog, "/") {
		return prog
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, prog)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return prog
}

// capped keeps the first MaxOutput bytes written to it.
type capped struct {
	b       bytes.Buffer
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	n := min(len(p), MaxOutput-c.b.Len())
	c.b.Write(p[:n])
	c.dropped += len(p) - n
	return len(p), nil
}

func (c *capped) String() string {
	if c.dropped > 0 {
		return c.b.String() + fmt.Sprintf("\n[%d bytes dropped]\n", c.dropped)
	}
	return c.b.String()
}

// Client calls a Server. Its methods are safe for concurrent use.
type Client struct {
	c *rpc.Client
}

// NewClient speaks to the Server at the other end of conn, which it owns
// from then on.
func NewClient(conn io.ReadWriteCloser) *Client { return &Client{c: jsonrpc.NewClient(conn)} }

// Close closes the connection; pending calls fail.
func (c *Client) Close() error { return c.c.Close() }

// Ping returns the guest kernel's release once the server answers.
func (c *Client) Ping(ctx context.Context) (string, error) {
	var rel string
	call := c.c.Go(rpcName+".Ping", &Empty{}, &rel, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		return rel, call.Error
	case <-ctx.Done():
		return "", fmt.Errorf("guestexec: ping: %w", context.Cause(ctx))
	}
}

// Run runs a program and returns how it ended; the error is for a call
// that failed (ctx ended, the connection broke, a bad request), not for
// a program that failed (RunReply.Err).
func (c *Client) Run(ctx context.Context, a RunArgs) (RunReply, error) {
	var rep RunReply
	call := c.c.Go(rpcName+".Run", &a, &rep, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
	case <-ctx.Done():
		return rep, fmt.Errorf("guestexec: %s: %w", a.Path, context.Cause(ctx))
	}
	if call.Error != nil {
		return rep, fmt.Errorf("guestexec: %s: %w", a.Path, call.Error)
	}
	return rep, nil
}
