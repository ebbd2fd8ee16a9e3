//go:build linux

package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openRawSerial opens a serial port in raw mode (cfmakeraw: no echo, no
// line editing, no CR/LF translation, no signals, 8 bits), so JSON-RPC
// bytes pass unchanged. The port is non-blocking so the runtime poller
// serves it and Close ends a read in progress.
func openRawSerial(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a terminal: %w", path, err)
	}
	makeRaw(t)
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: raw mode: %w", path, err)
	}
	unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIOFLUSH) // drop what arrived before
	return os.NewFile(uintptr(fd), path), nil
}

// makeRaw is cfmakeraw(3), plus the receiver on and modem lines ignored.
func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB | unix.CRTSCTS
	t.Cflag |= unix.CS8 | unix.CLOCAL | unix.CREAD
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}
