// Package vhosttest serves a vhost.Backend the way a daemon does, for
// tests: on a real unix socket, one front-end connection after another,
// until the test ends.
package vhosttest

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/vstellar/vstellar/vhost"
)

// Serve listens on a unix socket named name in a temporary directory and
// serves b on every connection accepted there, one at a time (a front-end
// that reconnects gets the same back-end). It returns the socket path. At
// the end of the test it stops serving and waits for the server to exit.
func Serve(t testing.TB, b *vhost.Backend, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	// Not t.Context() itself: it ends before the test's cleanups run,
	// and the VMs those close still talk to the back-end. Serving stops
	// in this cleanup, registered before theirs and so run after them.
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			b.Serve(ctx, c)
		}
	}()
	t.Cleanup(func() {
		cancel()
		l.Close()
		<-done
	})
	return path
}
