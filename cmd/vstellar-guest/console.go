//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bootTime is CLOCK_BOOTTIME: the time since the kernel started, which
// works before /proc is mounted.
func bootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// console prints one line per step: time since boot, time since the
// program started, the message.
type console struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Duration // bootTime at program start
}

func newConsole(w io.Writer, start time.Duration) *console { return &console{w: w, start: start} }

// sinceStart is the time since the program started.
func (c *console) sinceStart() time.Duration { return bootTime() - c.start }

func (c *console) printf(format string, args ...any) {
	now := bootTime()
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.w, "vstellar-guest: [%8.3fs +%7.3fs] %s\n", now.Seconds(), (now - c.start).Seconds(), fmt.Sprintf(format, args...))
}

// Write lets slog write through the console (one record per call).
func (c *console) Write(p []byte) (int, error) {
	c.printf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}
