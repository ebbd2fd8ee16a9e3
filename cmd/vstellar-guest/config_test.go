//go:build linux

package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseCmdline(t *testing.T) {
	for _, c := range []struct {
		line string
		want config
		bad  bool
	}{
		{"console=ttyS0 quiet", config{mode: "agent", devID: 42, tty: "/dev/ttyS1"}, false},
		{"console=ttyS0 vstellar.mode=probe vstellar.devid=41 panic=-1",
			config{mode: "probe", devID: 41, tty: "/dev/ttyS1", timeout: 2 * time.Minute}, false},
		{"vstellar.mode=probe vstellar.timeout=30s vstellar.poll=1 vstellar.addr=0000:00:03.0 vstellar.tty=/dev/ttyS2 vstellar.devid=0x29 vstellar.handback=on\n",
			config{mode: "probe", devID: 41, addr: "0000:00:03.0", tty: "/dev/ttyS2", poll: true, handBack: true, timeout: 30 * time.Second}, false},
		{"vstellar.mode=agent vstellar.timeout=0s", config{mode: "agent", devID: 42, tty: "/dev/ttyS1"}, false},
		{"vstellar.wait=1", config{mode: "agent", devID: 42, tty: "/dev/ttyS1", wait: true}, false},
		{"vstellar.mode=bench", config{}, true},
		{"vstellar.devid=70000", config{}, true},
		{"vstellar.devid=65000", config{}, true}, // 0x1040+id must fit 16 bits
		{"vstellar.devid=0", config{}, true},
		{"vstellar.timeout=soon", config{}, true},
	} {
		got, err := parseCmdline(c.line)
		if c.bad {
			if err == nil {
				t.Errorf("%q accepted: %+v", c.line, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.line, got, err, c.want)
		}
	}
}

func TestConfigFromFlags(t *testing.T) {
	c, err := configFromFlags([]string{"-mode", "probe", "-devid", "41", "-poll", "-wait"})
	if err != nil || c.mode != "probe" || c.devID != 41 || !c.poll || !c.wait || c.tty != "/dev/ttyS1" || c.timeout != 0 {
		t.Errorf("%+v, %v", c, err)
	}
	if _, err := configFromFlags([]string{"-mode", "x"}); err == nil {
		t.Error("mode x accepted")
	}
}

func TestMakeRaw(t *testing.T) {
	var tm unix.Termios
	tm.Iflag = unix.ICRNL | unix.IXON | unix.BRKINT
	tm.Oflag = unix.OPOST | unix.ONLCR
	tm.Lflag = unix.ECHO | unix.ICANON | unix.ISIG | unix.IEXTEN
	tm.Cflag = unix.CS7 | unix.PARENB
	makeRaw(&tm)
	if tm.Iflag&(unix.ICRNL|unix.IXON|unix.BRKINT) != 0 || tm.Oflag&unix.OPOST != 0 ||
		tm.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG|unix.IEXTEN) != 0 ||
		tm.Cflag&unix.CSIZE != unix.CS8 || tm.Cflag&unix.PARENB != 0 || tm.Cflag&unix.CREAD == 0 ||
		tm.Cc[unix.VMIN] != 1 || tm.Cc[unix.VTIME] != 0 {
		t.Errorf("not raw: %+v", tm)
	}
}

func TestConsoleLines(t *testing.T) {
	var b bytes.Buffer
	c := newConsole(&b, bootTime())
	c.printf("step %d", 1)
	c.Write([]byte("from slog\n"))
	re := regexp.MustCompile(`^vstellar-guest: \[ *\d+\.\d{3}s \+ *\d+\.\d{3}s\] step 1\nvstellar-guest: \[ *\d+\.\d{3}s \+ *\d+\.\d{3}s\] from slog\n$`)
	if !re.Match(b.Bytes()) {
		t.Errorf("console output %q", b.String())
	}
}

func TestModuleParams(t *testing.T) {
	line := "console=ttyS0 vstellar.mode=exec vstellar.ip=10.0.0.1/24 vstellar.virtio_id=21 vstellar.cmd_timeout_ms=5000 ib_core.x=1 vstellarx.y=2"
	if got := moduleParams(line, "vstellar"); got != "virtio_id=21 cmd_timeout_ms=5000" {
		t.Errorf("vstellar: %q", got)
	}
	if got := moduleParams(line, "ib_core"); got != "x=1" {
		t.Errorf("ib_core: %q", got)
	}
	if got := moduleParams(line, "uio"); got != "" {
		t.Errorf("uio: %q", got)
	}
}
