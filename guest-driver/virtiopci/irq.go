//go:build linux

package virtiopci

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
)

// intx takes the device's INTx interrupt through uio: a read of 4 bytes
// from /dev/uioN blocks until the interrupt fires (uio_pci_generic masks
// INTx in its handler with the command register's INTX_DISABLE bit),
// reading the virtio ISR acknowledges it and lowers the line, and
// clearing INTX_DISABLE in config space unmasks INTx again
// (uio_pci_generic has no irqcontrol: a write to /dev/uioN fails with
// ENOSYS; see the kernel's uio-howto). Every interrupt wakes every
// waiter: the driver rechecks its rings, which is all a shared line
// allows anyway.
type intx struct {
	f    *os.File
	cfg  *os.File // PCI config space
	isr  guestmem.View
	log  *slog.Logger
	mu   sync.Mutex
	wake chan struct{} // closed by the next interrupt
	n    atomic.Uint64 // interrupts taken
	done chan struct{}
}

func openINTx(node, config string, isr guestmem.View, log *slog.Logger) (*intx, error) {
	cfg, err := os.OpenFile(config, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("virtiopci: %w", err)
	}
	// Non-blocking, so the runtime poller serves the reads and Close
	// interrupts a read in progress.
	fd, err := unix.Open(node, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		cfg.Close()
		return nil, fmt.Errorf("virtiopci: open %s: %w", node, err)
	}
	q := &intx{f: os.NewFile(uintptr(fd), node), cfg: cfg, isr: isr, log: log, wake: make(chan struct{}), done: make(chan struct{})}
	if err := q.unmask(); err != nil {
		q.f.Close()
		cfg.Close()
		return nil, err
	}
	go q.run()
	return q, nil
}

// intxDisableHigh is PCI_COMMAND_INTX_DISABLE (bit 10) in the command
// register's high byte.
const intxDisableHigh = 1 << (10 - 8)

// unmask clears INTX_DISABLE with a one-byte read-modify-write of the
// command register's high byte, leaving memory and bus master alone.
func (q *intx) unmask() error {
	var b [1]byte
	if _, err := q.cfg.ReadAt(b[:], pciCommand+1); err != nil {
		return fmt.Errorf("virtiopci: unmask INTx: %w", err)
	}
	if b[0]&intxDisableHigh == 0 {
		return nil
	}
	b[0] &^= intxDisableHigh
	if _, err := q.cfg.WriteAt(b[:], pciCommand+1); err != nil {
		return fmt.Errorf("virtiopci: unmask INTx: %w", err)
	}
	return nil
}

func (q *intx) run() {
	defer close(q.done)
	var count [4]byte
	for {
		if _, err := q.f.Read(count[:]); err != nil {
			if !errors.Is(err, os.ErrClosed) {
				q.log.Warn("virtiopci: interrupt reader stopped", "err", err)
			}
			q.broadcast() // waiters fall back to polling
			return
		}
		q.isr.MMIORead8(0) // acknowledge: clears the ISR, lowers INTx
		q.n.Add(1)
		if err := q.unmask(); err != nil {
			q.log.Warn("virtiopci: interrupt reader stopped", "err", err)
			q.broadcast()
			return
		}
		q.broadcast()
	}
}

func (q *intx) broadcast() {
	q.mu.Lock()
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
}

// next returns a channel closed at the next interrupt. Take it before
// checking a ring, so an interrupt between the check and the sleep is
// not lost.
func (q *intx) next() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake
}

// close stops the reader.
func (q *intx) close() {
	q.f.Close()
	<-q.done
	q.cfg.Close()
}
