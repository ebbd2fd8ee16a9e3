package guestexec

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func pair(t *testing.T) *Client {
	t.Helper()
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&Server{Env: []string{"BASE=1", "PATH=/nonexistent:/usr/bin:/bin"}}).Serve(ctx, a)
	}()
	c := NewClient(b)
	t.Cleanup(func() {
		c.Close()
		cancel()
		<-done
	})
	return c
}

func TestRun(t *testing.T) {
	c := pair(t)
	ctx := t.Context()
	if rel, err := c.Ping(ctx); err != nil || rel == "" {
		t.Fatalf("ping: %q, %v", rel, err)
	}
	rep, err := c.Run(ctx, RunArgs{Path: "sh", Args: []string{"-c", "echo $BASE$EXTRA; cat; echo err >&2; exit 3"}, Env: []string{"EXTRA=2"}, Stdin: []byte("in")})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stdout != "12\nin" || rep.Stderr != "err\n" || rep.ExitCode != 3 || rep.Err() == nil {
		t.Fatalf("got %+v", rep)
	}
	rep, err = c.Run(ctx, RunArgs{Path: "/no/such/program"})
	if err != nil || rep.StartError == "" || rep.Err() == nil {
		t.Fatalf("missing program: %+v, %v", rep, err)
	}
	if _, err := c.Run(ctx, RunArgs{}); err == nil {
		t.Fatal("a run without a program was accepted")
	}
	if _, err := c.Run(ctx, RunArgs{Path: "true", TimeoutMs: -1}); err == nil {
		t.Fatal("a negative time limit was accepted")
	}
}

func TestRunTimeoutAndConcurrency(t *testing.T) {
	c := pair(t)
	ctx := t.Context()
	slow := make(chan RunReply, 1)
	go func() {
		rep, _ := c.Run(ctx, RunArgs{Path: "sleep", Args: []string{"10"}, TimeoutMs: 500})
		slow <- rep
	}()
	// A second call is served while the first still runs.
	start := time.Now()
	if rep, err := c.Run(ctx, RunArgs{Path: "true"}); err != nil || rep.Err() != nil {
		t.Fatalf("second call: %+v %v", rep, err)
	}
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Fatalf("second call waited %v for the first", d)
	}
	rep := <-slow
	if !rep.TimedOut || rep.Signal == "" || !strings.Contains(rep.Err().Error(), "time limit") {
		t.Fatalf("slow run: %+v", rep)
	}
}

func TestOutputCapped(t *testing.T) {
	c := pair(t)
	rep, err := c.Run(t.Context(), RunArgs{Path: "head", Args: []string{"-c", "2000000", "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stdout) < MaxOutput || !strings.Contains(rep.Stdout, "bytes dropped") {
		t.Fatalf("stdout of %d bytes", len(rep.Stdout))
	}
}
