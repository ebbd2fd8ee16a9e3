package hotplug

// These tests pin the limits of the pinned go-qemu (see doc.go) by
// driving its qmp.SocketMonitor alone against qmptest. If one fails
// after a go-qemu upgrade, the limit it pins may be gone and the
// work-around in monitor.go or client.go may be dead weight, or wrong.

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/vstellar/vstellar/internal/testkit/qmptest"
)

// rawMonitor connects go-qemu's monitor to a qmptest server with faults.
func rawMonitor(t *testing.T, f qmptest.Faults) (*qmp.SocketMonitor, *qmptest.Server) {
	t.Helper()
	srv := startQMP(t, tempDir(t), qmptest.Options{})
	srv.SetFaults(f)
	mon, err := qmp.NewSocketMonitor("unix", srv.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := mon.Connect(); err != nil {
		t.Fatal(err)
	}
	return mon, srv
}

// runAsync runs a command in the background.
func runAsync(mon *qmp.SocketMonitor, cmd string) chan string {
	done := make(chan string, 1)
	go func() {
		out, err := mon.Run([]byte(cmd))
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- string(out)
	}()
	return done
}

// notWithin reports whether nothing arrives on ch for d. (It can only
// err towards passing on a slow machine.)
func notWithin(ch chan string, d time.Duration) bool {
	select {
	case <-ch:
		return false
	case <-time.After(d):
		return true
	}
}

func TestGoQEMULineLimit(t *testing.T) {
	mon, _ := rawMonitor(t, qmptest.Faults{Commands: map[string]qmptest.Fault{"query-pci": {Kind: qmptest.Huge}}})
	defer mon.Disconnect()
	if _, err := mon.Run([]byte(`{"execute": "query-pci"}`)); err != bufio.ErrTooLong {
		t.Fatalf("a 70 KiB reply: %v, want bufio.ErrTooLong", err)
	}
	if _, err := mon.Run([]byte(`{"execute": "query-version"}`)); err == nil {
		t.Fatal("the monitor survived its reader")
	}
}

func TestGoQEMUUndrainedEventStallsReplies(t *testing.T) {
	mon, srv := rawMonitor(t, qmptest.Faults{})
	defer mon.Disconnect()
	events, _ := mon.Events(context.Background())
	if err := srv.Emit("RESUME", nil); err != nil {
		t.Fatal(err)
	}
	done := runAsync(mon, `{"execute": "query-version"}`)
	if !notWithin(done, 300*time.Millisecond) {
		t.Fatal("a reply came while an event was undrained")
	}
	if ev := <-events; ev.Event != "RESUME" {
		t.Fatalf("event %+v", ev)
	}
	if out := <-done; !strings.Contains(out, `"qemu"`) {
		t.Fatalf("reply %s", out)
	}
}

func TestGoQEMUNoIDCorrelation(t *testing.T) {
	mon, _ := rawMonitor(t, qmptest.Faults{Commands: map[string]qmptest.Fault{"query-version": {Kind: qmptest.WrongID}}})
	defer mon.Disconnect()
	out, err := mon.Run([]byte(`{"execute": "query-version", "id": "mine"}`))
	if err != nil || !strings.Contains(string(out), "qmptest-wrong-id") {
		t.Fatalf("%s %v: go-qemu checks ids now?", out, err)
	}
}

func TestGoQEMUEventBeforeCapabilitiesReply(t *testing.T) {
	mon, _ := rawMonitor(t, qmptest.Faults{EventBeforeCapabilities: 1})
	defer mon.Disconnect()
	// The event was taken for the qmp_capabilities reply; the reply
	// answers the next command.
	out, err := mon.Run([]byte(`{"execute": "query-version", "id": "mine"}`))
	var r map[string]json.RawMessage
	if err != nil || json.Unmarshal(out, &r) != nil || string(r["return"]) != "{}" || r["id"] != nil {
		t.Fatalf("first reply %s %v, want the qmp_capabilities reply", out, err)
	}
}

func TestGoQEMUDropsErrorClass(t *testing.T) {
	mon, _ := rawMonitor(t, qmptest.Faults{Commands: map[string]qmptest.Fault{
		"device_del": {Kind: qmptest.Refuse, Class: "DeviceNotFound", Desc: "Device 'x' not found"}}})
	defer mon.Disconnect()
	if _, err := mon.Run([]byte(`{"execute": "device_del", "arguments": {"id": "x"}}`)); err == nil || err.Error() != "Device 'x' not found" {
		t.Fatalf("error %v", err)
	}
}

func TestGoQEMUSkipsGarbage(t *testing.T) {
	mon, _ := rawMonitor(t, qmptest.Faults{Commands: map[string]qmptest.Fault{"query-version": {Kind: qmptest.Garbage, Raw: "garbage"}}})
	done := runAsync(mon, `{"execute": "query-version"}`)
	if !notWithin(done, 300*time.Millisecond) {
		t.Fatal("Run returned on a garbage line")
	}
	mon.Disconnect() // ends Run: go-qemu has no other way out
	<-done
}

// Run's reply is a window into its reader's buffer, not a copy: the
// reader's next read can overwrite it (the proxy gives go-qemu a
// stand-in instead, and holds its reader until Run has returned).
func TestGoQEMUReplyAliasesReadBuffer(t *testing.T) {
	mon, _ := rawMonitor(t, qmptest.Faults{})
	defer mon.Disconnect()
	out, err := mon.Run([]byte(`{"execute": "query-version"}`))
	if err != nil {
		t.Fatal(err)
	}
	// The first reply sits at the front of bufio.Scanner's 4 KiB buffer.
	if cap(out)-len(out) < 1024 {
		t.Fatalf("a %d-byte reply with room for %d: go-qemu copies it now?", len(out), cap(out))
	}
}
