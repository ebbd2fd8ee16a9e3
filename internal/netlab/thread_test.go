//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// homeNS is the namespace ordinary goroutines run in: that of any thread
// not inside Do. (/proc/self/ns/net would name the main thread's only.)
func homeNS(t *testing.T) uint64 {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return nsInode(t, "/proc/thread-self/ns/net")
}

// threadsOutside lists threads of this process whose network namespace is
// not want.
func threadsOutside(t *testing.T, want uint64) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, task := range tasks {
		var st unix.Stat_t
		if err := unix.Stat("/proc/self/task/"+task.Name()+"/ns/net", &st); err != nil {
			continue // thread exited meanwhile
		}
		if st.Ino != want {
			bad = append(bad, fmt.Sprintf("tid %s in ns %d", task.Name(), st.Ino))
		}
	}
	return bad
}

func TestDoThreadHygiene(t *testing.T) {
	bed := newBed(t, Options{})
	a, b := bed.Host("a"), bed.Host("b")
	home := homeNS(t)
	nsOf := map[*Host]uint64{a: nsInode(t, nsDir+"/"+a.Namespace()), b: nsInode(t, nsDir+"/"+b.Namespace())}

	// Many concurrent Do calls, each checking where it runs and opening a
	// socket there.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h.Do(func() error {
				var st unix.Stat_t
				if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
					return err
				}
				if st.Ino != nsOf[h] {
					return fmt.Errorf("Do for %s ran in ns %d", h.Name(), st.Ino)
				}
				c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: h.Addr().AsSlice()})
				if err != nil {
					return err
				}
				return c.Close()
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if bad := threadsOutside(t, home); len(bad) > 0 {
		t.Fatalf("threads left in foreign namespaces after Do: %v", bad)
	}

	// fn's error comes back; a panic is re-raised in the caller.
	sentinel := errors.New("from fn")
	if err := a.Do(func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("Do error %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want boom", r)
			}
		}()
		a.Do(func() error { panic("boom") })
		t.Fatal("Do did not re-raise the panic")
	}()
	if err := a.Do(func() error { runtime.Goexit(); return nil }); !errors.Is(err, errGoexit) {
		t.Fatalf("Goexit inside Do: %v", err)
	}
	if bad := threadsOutside(t, home); len(bad) > 0 {
		t.Fatalf("threads left in foreign namespaces after panic/Goexit: %v", bad)
	}
}

// TestRestoreFailureKillsThread forces the "cannot move the thread back"
// path and checks the thread is discarded, not reused.
func TestRestoreFailureKillsThread(t *testing.T) {
	bed := newBed(t, Options{})
	a := bed.Host("a")
	home := homeNS(t)
	// Repeat so that, by chance, the goroutine also starts on the main
	// thread at some point, which must be handled by moving off it.
	for range 10 {
		var tid int
		err := onThreadRestore(a.ns.enter, func() error {
			tid = unix.Gettid()
			return nil
		}, func(netns.NsHandle) error { return errors.New("injected restore failure") })
		if err == nil {
			t.Fatal("restore failure not reported")
		}
		if tid == os.Getpid() {
			t.Fatal("namespace work ran on the main thread, which cannot be discarded")
		}
		path := "/proc/self/task/" + strconv.Itoa(tid)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("thread %d stuck in the host namespace is still alive", tid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if bad := threadsOutside(t, home); len(bad) > 0 {
		t.Fatalf("threads in foreign namespaces: %v", bad)
	}
}
