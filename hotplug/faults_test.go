package hotplug

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/testkit/qmptest"
)

// A peer that is not QEMU, or a QEMU that misbehaves, during Dial: each
// gives its own error, in time.
func TestDialFaults(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name   string
		faults qmptest.Faults
		want   []string
		is     error
	}{
		{"no greeting", qmptest.Faults{NoGreeting: true}, []string{"no QMP greeting", "another client"}, os.ErrDeadlineExceeded},
		{"not JSON", qmptest.Faults{Greeting: "SSH-2.0-OpenSSH_9.2"}, []string{"bad greeting", `"SSH-2.0-OpenSSH_9.2"`}, ErrProtocol},
		{"not a greeting", qmptest.Faults{Greeting: `{"return": {}}`}, []string{"bad greeting", "first message is not a greeting"}, ErrProtocol},
		{"greeting without version", qmptest.Faults{Greeting: `{"QMP": {"capabilities": []}}`}, []string{"bad greeting", "without version.qemu"}, ErrProtocol},
		{"capabilities refused", qmptest.Faults{Commands: map[string]qmptest.Fault{
			"qmp_capabilities": {Kind: qmptest.Refuse, Class: "GenericError", Desc: "no thanks"}}}, []string{"qmp_capabilities refused: no thanks"}, ErrProtocol},
		{"capabilities unanswered", qmptest.Faults{Commands: map[string]qmptest.Fault{
			"qmp_capabilities": {Kind: qmptest.Silent}}}, []string{"no reply to qmp_capabilities within 500ms"}, os.ErrDeadlineExceeded},
		{"capabilities garbage", qmptest.Faults{Commands: map[string]qmptest.Fault{
			"qmp_capabilities": {Kind: qmptest.Garbage, Raw: `{"hello": "world"}`}}}, []string{"answer to qmp_capabilities is not QMP", "hello"}, ErrProtocol},
		{"hang-up mid-reply", qmptest.Faults{Commands: map[string]qmptest.Fault{
			"qmp_capabilities": {Kind: qmptest.HangUp}}}, []string{"connection ended (EOF) in the middle of a line", `"{\"retu`}, nil},
		{"first reply out of step", qmptest.Faults{Commands: map[string]qmptest.Fault{
			"query-version": {Kind: qmptest.WrongID}}}, []string{"query-version: QMP protocol error: reply out of step", "qmptest-wrong-id"}, ErrProtocol},
		{"event before capabilities reply, twice", qmptest.Faults{EventBeforeCapabilities: 2}, []string{"reply out of step", `{\"return\":{}}`}, ErrProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			dir := tempDir(t)
			srv := startQMP(t, dir, qmptest.Options{})
			srv.SetFaults(tc.faults)
			start := time.Now()
			c, err := Dial(context.Background(), srv.Path(), Options{ConnectTimeout: timeout, CommandTimeout: timeout})
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Dial took %v with a %v timeout", d, timeout)
			}
		})
	}
}

func TestDialBounds(t *testing.T) {
	noLeaks(t)
	dir := tempDir(t)
	if _, err := Dial(context.Background(), filepath.Join(dir, "none.sock"), Options{}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing socket: %v", err)
	}
	srv := startQMP(t, dir, qmptest.Options{})
	srv.SetFaults(qmptest.Faults{NoGreeting: true})
	// The context's deadline bounds Dial when it is the nearer one...
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, srv.Path(), Options{ConnectTimeout: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context deadline: %v", err)
	}
	// ...and cancelling it ends the wait at once.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := Dial(ctx, srv.Path(), Options{ConnectTimeout: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := Dial(ctx, srv.Path(), Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("already cancelled: %v", err)
	}
}

// go-qemu takes an event sent before the qmp_capabilities reply for
// the reply; Dial notices the stream is out of step and reconnects.
func TestDialEventBeforeCapabilities(t *testing.T) {
	noLeaks(t)
	dir := tempDir(t)
	srv := startQMP(t, dir, qmptest.Options{})
	be := startBackend(t, filepath.Join(dir, "vm1.sock"))
	srv.SetFaults(qmptest.Faults{EventBeforeCapabilities: 1})
	c := dialT(t, srv.Path(), Options{})
	if n := srv.Connections(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	if _, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"}); err != nil {
		t.Fatal(err)
	}
}

// A reply that goes wrong during Attach: the error says how, the
// connection is dropped, and a new one undoes the attach.
func TestAttachReplyFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command string
		fault   qmptest.Fault
		want    []string
		undone  int
	}{
		{"garbage", "device_add", qmptest.Fault{Kind: qmptest.Garbage, Raw: "\x00\x01 not json"}, []string{"no reply within 300ms", `1 line(s) that are not QMP, the last "\x00\x01 not json"`}, 1},
		{"hang-up mid-reply", "device_add", qmptest.Fault{Kind: qmptest.HangUp, Execute: true},
			[]string{"connection lost: EOF", "in the middle of a line"}, 2},
		{"wrong id", "query-pci", qmptest.Fault{Kind: qmptest.WrongID}, []string{"reply out of step", "is not to vst-"}, 2},
		{"huge reply", "query-pci", qmptest.Fault{Kind: qmptest.Huge}, []string{"a line longer than 65535 bytes (go-qemu's limit)"}, 2},
		{"error with an empty desc", "query-pci", qmptest.Fault{Kind: qmptest.Refuse, Class: "GenericError"}, []string{"QEMU refused query-pci: GenericError: "}, 2},
		{"silent chardev-add", "chardev-add", qmptest.Fault{Kind: qmptest.Silent, Execute: true}, []string{"chardev-add: no reply"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			dir := tempDir(t)
			srv := startQMP(t, dir, qmptest.Options{})
			be := startBackend(t, filepath.Join(dir, "vm1.sock"))
			c := dialT(t, srv.Path(), Options{CommandTimeout: 300 * time.Millisecond})
			srv.SetFaults(qmptest.Faults{Commands: map[string]qmptest.Fault{tc.command: tc.fault}})
			_, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Bus: "rp0"})
			se := asStep(t, err)
			if se.Step != tc.command {
				t.Errorf("step %s, want %s", se.Step, tc.command)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if se.RollbackErr != nil || len(se.RolledBack) != tc.undone {
				t.Errorf("rollback %v %v", se.RolledBack, se.RollbackErr)
			}
			if len(srv.Devices()) != 0 || len(srv.Chardevs()) != 0 {
				t.Errorf("left in QEMU: %+v %+v", srv.Devices(), srv.Chardevs())
			}
		})
	}
}
