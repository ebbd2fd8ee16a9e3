package hotplug

import (
	"context"
	"testing"

	"github.com/vstellar/vstellar/internal/testkit/qmptest"
)

// BenchmarkExecute is one command's round trip through go-qemu and the
// proxy to qmptest.
func BenchmarkExecute(b *testing.B) {
	srv, err := qmptest.Start(tempDir(b)+"/qmp.sock", qmptest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := Dial(context.Background(), srv.Path(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, err := c.Execute(context.Background(), "query-version", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDial is a connect, handshake and first command.
func BenchmarkDial(b *testing.B) {
	srv, err := qmptest.Start(tempDir(b)+"/qmp.sock", qmptest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	for b.Loop() {
		c, err := Dial(context.Background(), srv.Path(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
