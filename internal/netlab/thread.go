//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// errGoexit reports that fn ended its goroutine with runtime.Goexit (for
// example t.FailNow called inside Do) instead of returning.
var errGoexit = errors.New("netlab: function called runtime.Goexit inside a namespace")

type threadResult struct {
	err      error
	panicked bool
	panicVal any
}

// onThread runs fn on a fresh goroutine whose OS thread is locked and moved
// by enter into another network namespace; afterwards the thread is moved
// back to the namespace it started in.
//
// Invariant: a thread is handed back to the Go scheduler only once it is
// verifiably back in its original namespace. If enter fails the thread is
// unchanged (setns/unshare are all-or-nothing) and is unlocked; if restoring
// fails the goroutine exits still locked, which makes the runtime terminate
// the thread rather than reuse it.
//
// A panic in fn is re-raised on the caller's goroutine, so Do behaves like a
// direct call.
func onThread(enter func() error, fn func() error) error {
	return onThreadRestore(enter, fn, netns.Set)
}

// onThreadRestore is onThread with the restore step injectable, so tests can
// exercise the "thread cannot go home" path.
func onThreadRestore(enter func() error, fn func() error, restore func(netns.NsHandle) error) error {
	res := runLocked(enter, fn, restore)
	if res.panicked {
		panic(res.panicVal)
	}
	return res.err
}

// runLocked does the work of onThreadRestore and reports how fn ended.
// Every fd it opens is closed before it returns.
func runLocked(enter func() error, fn func() error, restore func(netns.NsHandle) error) threadResult {
	done := make(chan threadResult, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == os.Getpid() {
			// This is the main thread, which the runtime cannot
			// terminate (it parks it forever instead, and the
			// process's /proc/self/ns/net would then name the foreign
			// namespace). Keep it occupied and locked here so the
			// nested goroutine necessarily gets another thread.
			res := runLocked(enter, fn, restore)
			runtime.UnlockOSThread()
			done <- res
			return
		}
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- threadResult{err: fmt.Errorf("netlab: get current namespace: %w", err)}
			return
		}
		if err := enter(); err != nil {
			orig.Close()
			runtime.UnlockOSThread()
			done <- threadResult{err: err}
			return
		}
		var res threadResult
		returned := false
		defer func() {
			if !returned {
				if r := recover(); r != nil {
					res = threadResult{panicked: true, panicVal: r}
				} else {
					res = threadResult{err: errGoexit}
				}
			}
			rerr := restore(orig)
			orig.Close()
			if rerr != nil {
				// Stay locked: the goroutine ends here and the runtime
				// kills this thread instead of reusing it in a foreign
				// namespace.
				res.err = errors.Join(res.err, fmt.Errorf("netlab: restore thread namespace (thread discarded): %w", rerr))
				done <- res
				return
			}
			runtime.UnlockOSThread()
			done <- res
		}()
		res.err = fn()
		returned = true
	}()
	return <-done
}
