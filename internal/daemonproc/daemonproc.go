// Package daemonproc runs the real vstellard binary as a separate
// process, exactly as an operator starts it, for the end-to-end and
// hostile test suites: a crash shows as an exit, and descriptors and RSS
// are the daemon's own.
package daemonproc

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Binary builds cmd/vstellard once per test binary and returns its path,
// or returns $VSTELLARD_BIN when set (to run a suite against another
// build of the daemon).
var Binary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("VSTELLARD_BIN"); bin != "" {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "vstellard-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "vstellard")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "build", "-o", bin, "github.com/vstellar/vstellar/cmd/vstellard").CombinedOutput()
	if err != nil {
		return "", errors.New(string(out))
	}
	return bin, nil
})

// Log collects a process's output; safe for concurrent use.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Proc is a running vstellard.
type Proc struct {
	Cmd    *exec.Cmd
	Logs   *Log
	Exited chan error // receives Wait's result once the process ends
}

// Start runs vstellard with args. The test's cleanup kills it and, if the
// test failed, logs the last 64 KiB of its output.
func Start(t testing.TB, args ...string) *Proc {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("building vstellard: %v", err)
	}
	p := &Proc{Cmd: exec.Command(bin, args...), Logs: &Log{}, Exited: make(chan error, 1)}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Exited <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-p.Exited
		if t.Failed() {
			logs := p.Logs.String()
			t.Logf("vstellard logs (last 64 KiB):\n%s", logs[max(0, len(logs)-64<<10):])
		}
	})
	return p
}
