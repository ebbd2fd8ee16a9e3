package hotplug

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the real qemu-system-x86_64. QEMU before 10.2 (CI
// installs 10.0) has no user-creatable vhost-user-test-device-pci, so
// they show the failure path end to end and that QEMU takes the rest.

// needQEMU returns qemu-system-x86_64's path; without it the test skips
// outside CI and fails under CI=true.
func needQEMU(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no qemu-system-x86_64: %v", err)
		}
		t.Skipf("no qemu-system-x86_64 (%v): the real-QEMU tests need it", err)
	}
	return p
}

// startQEMU runs QEMU with a QMP socket and returns the socket. QEMU is
// killed when the test ends (and if the test binary dies).
func startQEMU(t *testing.T, dir string, args ...string) string {
	t.Helper()
	qmpPath := filepath.Join(dir, "qmp.sock")
	cmd := exec.Command(needQEMU(t), append(args, "-nodefaults", "-display", "none", "-qmp", "unix:"+qmpPath+",server=on,wait=off")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("QEMU exited: %s", stderr.String())
		default:
		}
		// The file appears at bind, a moment before QEMU listens.
		if c, err := net.Dial("unix", qmpPath); err == nil {
			c.Close()
			return qmpPath
		}
	}
	t.Fatal("QEMU's QMP socket did not appear")
	return ""
}

func TestRealQEMUAttachRollsBack(t *testing.T) {
	noLeaks(t)
	dir := tempDir(t)
	qmpPath := startQEMU(t, dir, "-machine", "none")
	be := startBackend(t, filepath.Join(dir, "vm1.sock"))
	c := dialT(t, qmpPath, Options{})
	v := c.Version()
	t.Logf("QEMU %s (%s)", v, v.Package)

	_, err := c.Attach(context.Background(), Spec{ID: "vst0", Socket: be.path, Reconnect: time.Second})
	se := asStep(t, err)
	var qe *QMPError
	if se.Step != "device_add" || !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Fatalf("error %v", err)
	}
	if !v.AtLeast(10, 2) {
		if qe.Desc != "'vhost-user-test-device-pci' is not a valid device model name" || !strings.Contains(se.Hint, "10.2") {
			t.Fatalf("error %v", err)
		}
	} else if !strings.Contains(qe.Desc, "No 'PCI' bus found") { // -machine none has no PCI bus
		t.Fatalf("error %v", err)
	}
	if !slices.Equal(se.RolledBack, []string{"chardev-remove vst0-chr"}) || se.RollbackErr != nil {
		t.Fatalf("rollback %v %v", se.RolledBack, se.RollbackErr)
	}
	t.Logf("attach: %v", err)
	// QEMU connected to the back-end on chardev-add, and hung up on
	// chardev-remove; the chardev is gone.
	if !closedByPeer(t, be.waitConns(t, 1)[0]) {
		t.Error("QEMU's connection to the backend is still open")
	}
	chr, err := c.Chardevs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chr {
		if ch.Label == "vst0-chr" {
			t.Fatalf("chardev left: %+v", chr)
		}
	}
}

// Error classes come through go-qemu (which drops them) by the tap.
func TestRealQEMUErrors(t *testing.T) {
	noLeaks(t)
	dir := tempDir(t)
	c := dialT(t, startQEMU(t, dir, "-machine", "none"), Options{})
	ctx := context.Background()
	_, err := c.Detach(ctx, "vst0")
	var qe *QMPError
	if se := asStep(t, err); !errors.As(err, &qe) || qe.Class != "DeviceNotFound" || se.Step != "qom-get chardev" {
		t.Fatalf("detach: %v", err)
	}
	_, err = c.Execute(ctx, "no-such-command", nil)
	if !errors.As(err, &qe) || *qe != (QMPError{Command: "no-such-command", Class: "CommandNotFound", Desc: "The command no-such-command has not been found"}) {
		t.Fatalf("execute: %v", err)
	}
	_, err = c.Attach(ctx, Spec{ID: "vst0", Socket: filepath.Join(dir, "none.sock")})
	if se := asStep(t, err); se.Step != "chardev-add" || !strings.Contains(err.Error(), "Failed to connect to") || len(se.RolledBack) != 0 {
		t.Fatalf("attach without a backend: %v", err)
	}
	if _, err := c.Execute(ctx, "query-version", nil); err != nil {
		t.Fatalf("the connection did not survive QEMU's errors: %v", err)
	}
}

// QEMUArgs' command line: QEMU takes all of it up to the device (which
// 10.0 does not have), and without the device it runs with the memfd
// and connects to the back-end's socket, a path with a comma in it.
func TestRealQEMUArgs(t *testing.T) {
	qemu := needQEMU(t)
	for _, layout := range []MemLayout{MemNUMA, MemMachine} {
		t.Run(string(layout), func(t *testing.T) {
			noLeaks(t)
			dir := tempDir(t)
			be := startBackend(t, filepath.Join(dir, "vm,1.sock"))
			args, err := QEMUArgs(Memory{Size: 64 << 20, Layout: layout}, Spec{ID: "vst0", Socket: be.path, Reconnect: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			base := []string{"-machine", "q35", "-S", "-nodefaults", "-display", "none"}

			if v := qemuVersion(t, qemu); v.AtLeast(10, 2) {
				// It has the device, which would negotiate with the
				// back-end while QEMU starts: the e2e tests' job.
				t.Logf("QEMU %s has %s: only the command line without it is run", v, DefaultDriver)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, qemu, append(base, args...)...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("QEMU with the device: %v: %s", err, out)
				}
				msg := strings.TrimSpace(string(out))
				t.Logf("with the device: %s", msg)
				if strings.Count(msg, "\n") != 0 || !strings.HasSuffix(msg, "'vhost-user-test-device-pci' is not a valid device model name") {
					t.Fatalf("QEMU objected to more than the device: %s", msg)
				}
			}

			i := slices.Index(args, "-device")
			noDev := append(slices.Clone(args[:i]), args[i+2:]...)
			// (The QEMU above may have connected before it gave up.)
			before := len(be.conns())
			c := dialT(t, startQEMU(t, dir, append(base, noDev...)...), Options{})
			be.waitConns(t, before+1) // QEMU connected to the back-end
			ret, err := c.Execute(context.Background(), "query-memdev", nil)
			if err != nil {
				t.Fatal(err)
			}
			var mem []struct {
				ID    string `json:"id"`
				Size  int64  `json:"size"`
				Share bool   `json:"share"`
			}
			if err := json.Unmarshal(ret, &mem); err != nil || len(mem) != 1 || mem[0].ID != "mem" || mem[0].Size != 64<<20 || !mem[0].Share {
				t.Fatalf("memdev %s %v", ret, err)
			}
			// QEMU's chardev shows connected once its connect completes.
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				chr, err := c.Chardevs(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if slices.ContainsFunc(chr, func(ch Chardev) bool { return ch.Label == "vst0-chr" && ch.Filename == "unix:"+be.path }) {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("chardevs %+v", chr)
				}
			}
		})
	}
}

// qemuVersion asks the binary its version.
func qemuVersion(t *testing.T, qemu string) Version {
	t.Helper()
	out, err := exec.Command(qemu, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v Version
	if _, err := fmt.Sscanf(string(out), "QEMU emulator version %d.%d.%d", &v.Major, &v.Minor, &v.Micro); err != nil {
		t.Fatalf("version %q: %v", out, err)
	}
	return v
}
