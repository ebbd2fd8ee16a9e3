package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The process's own resources, read from /proc/self, for the devices
// suite's steady states and leak check.

// procState is the process at one moment.
type procState struct {
	rss        uint64 // VmRSS, bytes
	goroutines int
	fds        int // open file descriptors
	maps       int // lines of /proc/self/maps: mappings
	// fileMaps is the mappings of files, memfds included (guest RAM,
	// doorbell pages): anonymous ones come and go with the Go heap.
	fileMaps int
}

func readProc() (procState, error) {
	var p procState
	var err error
	if p.rss, err = readRSS(); err != nil {
		return p, err
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return p, fmt.Errorf("counting fds: %w", err)
	}
	p.fds = len(fds) - 1 // the directory ReadDir had open
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return p, fmt.Errorf("counting mappings: %w", err)
	}
	for line := range bytes.Lines(maps) {
		p.maps++
		if f := bytes.Fields(line); len(f) >= 6 && f[5][0] == '/' {
			p.fileMaps++
		}
	}
	p.goroutines = runtime.NumGoroutine()
	return p, nil
}

// readRSS is /proc/self/status's VmRSS in bytes.
func readRSS() (uint64, error) { return procKB("/proc/self/status", "VmRSS:") }

// procKB reads the "key: N kB" line of a /proc file, in bytes.
func procKB(path, key string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", key, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == key {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s has no %s", path, key)
}

// settledProc waits d, collects garbage and returns the free heap to the
// system (so that RSS is what is live, not what the scavenger has yet to
// give back), waits a little for goroutines that were ending, and reads
// the process.
func settledProc(ctx context.Context, d time.Duration) (procState, error) {
	if err := sleepCtx(ctx, d); err != nil {
		return procState{}, err
	}
	debug.FreeOSMemory()
	if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
		return procState{}, err
	}
	return readProc()
}

// idleCPU is the process's CPU time over d, user and system, as a
// percentage of one core: after a GC, so that the collector's work on
// earlier garbage is not counted (as hostsim's idle-cost test does).
func idleCPU(ctx context.Context, d time.Duration) (float64, error) {
	runtime.GC()
	if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
		return 0, err
	}
	c0, err := cpuTime()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return 0, err
	}
	c1, err := cpuTime()
	if err != nil {
		return 0, err
	}
	return 100 * (c1 - c0).Seconds() / time.Since(t0).Seconds(), nil
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Fds per device, measured: the device's own (its socket and its
// listener's), and a VM's (its vhost-user connection, memfd, eventfds and
// doorbell memory), both ends counted since the VMs run in this process;
// with room to spare.
const (
	devFDs   = 3
	devVMFDs = 28
	// devFDSlack is fds kept free for everything else (API connections,
	// the Go runtime, the test binary).
	devFDSlack = 512
)

// raiseFDLimit raises the soft fd limit towards need (Go already raises
// it to the hard limit at start-up; raising the hard one takes
// CAP_SYS_RESOURCE, which a container may lack) and returns the limit in
// force.
func raiseFDLimit(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Cur >= need {
		return lim.Cur, nil
	}
	want := syscall.Rlimit{Cur: need, Max: max(lim.Max, need)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
		return need, nil
	}
	if lim.Cur < lim.Max {
		want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			return lim.Max, nil
		}
	}
	return lim.Cur, nil
}
