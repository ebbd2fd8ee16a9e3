package hotplug

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/vstellar/vstellar/internal/testkit/qmptest"
	"golang.org/x/sys/unix"
)

// strangerEnv makes the test binary a stranger to the proxy: it
// connects to the address in it (see TestProxyRefusesStrangers).
const strangerEnv = "HOTPLUG_TEST_STRANGER"

func TestMain(m *testing.M) {
	if addr := os.Getenv(strangerEnv); addr != "" {
		os.Exit(stranger(addr))
	}
	os.Exit(m.Run())
}

// stranger connects to addr, says so, and says how the connection
// ended.
func stranger(addr string) int {
	c, err := net.Dial("unix", addr)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	fmt.Println("connected")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	fmt.Println("read:", err)
	return 0
}

// proxied connects go-qemu's monitor to path through the proxy, as Dial
// does but without a Client: the test calls advance and release.
func proxied(t *testing.T, path string) (*qmp.SocketMonitor, *proxy) {
	t.Helper()
	mon, px, err := openMonitor(context.Background(), path, time.Now().Add(5*time.Second), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	px.start()
	t.Cleanup(func() {
		px.close()
		mon.Disconnect()
		px.wait()
	})
	return mon, px
}

// unread is how many bytes written to c its peer has not read.
func unread(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// go-qemu gets a stand-in for each reply, and nothing past it until
// release, however long the wait; the tap keeps the reply.
func TestProxyHoldsReply(t *testing.T) {
	noLeaks(t)
	srv := startQMP(t, tempDir(t), qmptest.Options{})
	mon, px := proxied(t, srv.Path())
	if err := mon.Connect(); err != nil {
		t.Fatal(err)
	}
	px.tap.advance(handshakeLines)
	events, _ := mon.Events(context.Background())
	for i := range 3 {
		out, err := mon.Run([]byte(`{"execute": "query-version", "id": "vst-1"}`))
		if err != nil || string(out)+"\n" != string(standIn) {
			t.Fatalf("go-qemu's reply %q %v, want the stand-in", out, err)
		}
		if r, ok := px.tap.takeReply(); !ok || !strings.Contains(string(r), `"qemu"`) || !strings.Contains(string(r), `"vst-1"`) {
			t.Fatalf("the tap kept %q (%v)", r, ok)
		}
		if err := srv.Emit("RESUME", map[string]any{"n": i}); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-events:
			t.Fatalf("go-qemu read %+v past an unreleased reply", ev)
		case <-time.After(300 * time.Millisecond):
		}
		if n := unread(t, px.peer); n != 0 {
			t.Fatalf("held, yet %d bytes on go-qemu's socket", n)
		}
		px.tap.release()
		select {
		case ev := <-events:
			if ev.Event != "RESUME" || ev.Data["n"] != float64(i) {
				t.Fatalf("event %+v", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no event after release")
		}
	}
}

// Replies and events of many sizes move the stand-ins all over
// go-qemu's read buffer, past its middle too, where its next read
// starts again at the front: under -race, no read may be reported as
// racing with Run's use of a stand-in (see proxy).
func TestProxyStandInsRaceFree(t *testing.T) {
	noLeaks(t)
	dir := tempDir(t)
	srv := startQMP(t, dir, qmptest.Options{})
	be := startBackend(t, filepath.Join(dir, "vm1.sock"))
	c := dialT(t, srv.Path(), Options{})
	ctx := context.Background()
	for i := range 200 {
		size := i * 37 % 5000
		srv.SetFaults(qmptest.Faults{Commands: map[string]qmptest.Fault{"query-version": {Kind: qmptest.Huge, Size: size + 1}}})
		if _, err := c.Execute(ctx, "query-version", nil); err != nil {
			t.Fatal(err)
		}
		// An event right behind the reply: the first thing go-qemu
		// reads after it, as big as the reply.
		w := c.subscribe(func(ev qmp.Event) bool { return ev.Data["n"] == float64(i) })
		if err := srv.Emit("RESUME", map[string]any{"n": i, "pad": strings.Repeat("y", size)}); err != nil {
			t.Fatal(err)
		}
		if err := c.wait(ctx, w); err != nil {
			t.Fatal(err)
		}
		c.unsubscribe(w)
	}
	if _, err := c.Attach(ctx, Spec{ID: "vst0", Socket: be.path, Bus: "rp0"}); err != nil {
		t.Fatal(err)
	}
}

// go-qemu's Connect decodes the greeting and the qmp_capabilities reply
// with a json.Decoder, which keeps what it reads past them: a line the
// peer sends right after the reply (here in the same write) must reach
// go-qemu's reader, not the decoder.
func TestProxyHandshakeLines(t *testing.T) {
	noLeaks(t)
	ln, err := net.Listen("unix", filepath.Join(tempDir(t), "qmp.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			defer c.Close()
			c.Write([]byte(qmpSeeds[0] + "\r\n"))
			r := bufio.NewReader(c)
			if l, err := r.ReadString('\n'); err != nil || !strings.Contains(l, "qmp_capabilities") {
				return fmt.Errorf("read %q %v, want qmp_capabilities", l, err)
			}
			c.Write([]byte("{\"return\": {}}\r\n" + qmpSeeds[4] + "\r\n"))
			io.Copy(io.Discard, r) // until the client goes
			return nil
		}()
	}()
	mon, px := proxied(t, ln.Addr().String())
	if err := mon.Connect(); err != nil {
		t.Fatal(err)
	}
	events, _ := mon.Events(context.Background())
	px.tap.advance(handshakeLines)
	select {
	case ev := <-events:
		if ev.Event != "RESUME" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the line after the qmp_capabilities reply never reached go-qemu's reader")
	}
	px.close()
	mon.Disconnect()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// The proxy takes one connection, from this process: a stranger that
// finds the name first is closed, and once go-qemu is in, nobody
// listens there any more.
func TestProxyRefusesStrangers(t *testing.T) {
	noLeaks(t)
	ln, err := listenProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	if !strings.HasPrefix(addr, "@") {
		t.Fatalf("address %q is not abstract", addr)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), strangerEnv+"="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	said := bufio.NewScanner(out)
	if !said.Scan() || said.Text() != "connected" {
		t.Fatalf("stranger: %q %v", said.Text(), said.Err())
	}
	// The stranger is first in the backlog; ours is second.
	own, err := net.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var logs bytes.Buffer
	got, err := acceptOwn(ln, time.Now().Add(5*time.Second), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	ln.Close()

	if _, err := own.Write([]byte("mine")); err != nil {
		t.Fatal(err)
	}
	got.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4)
	if _, err := io.ReadFull(got, b); err != nil || string(b) != "mine" {
		t.Fatalf("accepted connection read %q %v: not ours", b, err)
	}
	if !said.Scan() || said.Text() != "read: EOF" {
		t.Fatalf("stranger: %q %v, want its connection closed", said.Text(), said.Err())
	}
	if l := logs.String(); !strings.Contains(l, "refused a connection from another process") || !strings.Contains(l, "pid="+strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("log %q does not name the stranger's pid %d", l, cmd.Process.Pid)
	}
	if c, err := net.Dial("unix", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a connection after accept: %v, want ECONNREFUSED", err)
	}
}

// A Client's proxy refuses any connection but go-qemu's.
func TestProxySecondConnectionRefused(t *testing.T) {
	_, _, c := rig(t, qmptest.Options{}, Options{})
	if !strings.HasPrefix(c.px.addr, "@") {
		t.Fatalf("proxy address %q is not abstract", c.px.addr)
	}
	if nc, err := net.Dial("unix", c.px.addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("a second connection to the proxy: %v, want ECONNREFUSED", err)
	}
	if _, err := c.Execute(context.Background(), "query-version", nil); err != nil {
		t.Fatal(err)
	}
}
