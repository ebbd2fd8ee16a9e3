//go:build linux

package netlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Delay needs something that holds each packet for a fixed time while
// later packets keep arriving. In the kernel only netem, and fq/etf
// honouring skb->tstamp (the EDT model), do that; kernels built without
// them (like the one this was written on: no netem, fq, etf, taprio or
// sch_bpf) have only token buckets, which let a packet through at once
// whenever the bucket has refilled, so they delay bursts, never an
// isolated packet.
//
// So the hold happens in user space, on a delay line per port: a cls_bpf
// program on the port's clsact egress stamps each packet with the time
// (an 802.1ad tag carried as metadata) and redirects it to a tap device in
// the same namespace, whose tbf applies the port's rate limit; a dedicated
// thread reads the frame, keeps it until stamp + delay and writes it back
// into the tap, untagged; a second program on the tap's clsact ingress
// redirects it to the port's egress, where the first program recognises it
// by its ingress device and lets it go on to the loss filter and the
// port's root qdisc. Order on the wire: rate limit, delay, loss.
//
// The thread waits in ppoll(2) with a nanosecond timeout and a 1 ns timer
// slack, wakes early by the timer lateness it has been seeing and spins
// the rest (departureTimer), so a frame leaves on time or late by a
// wake-up latency, never early; the stamp keeps the thread's own latency
// in reading a frame out of the delay. Due times never decrease, so the
// line never reorders. The price is CPU: each delayed frame costs a read
// and a write system call (about 1 Gbit/s of full frames per direction
// here), frames are segmented and checksummed in software on the way into
// the tap, and the thread spins up to a quarter of its time.

const (
	// MaxDelay is the largest accepted one-way delay.
	MaxDelay = time.Second
	// delayPriority runs the redirect before the loss filter.
	delayPriority = 1
	// delayTapName is the delay line's tap device, inside the port's
	// namespace.
	delayTapName = "netlab-dl"
	// delayTapQueue is the tap's queue length in frames: what may wait for
	// the thread to read it.
	delayTapQueue = 10000
	// delayQueueBytes bounds what one line holds (64 MiB: 1 s of 500
	// Mbit/s); beyond it frames are dropped and counted.
	delayQueueBytes = 64 << 20
	// delayReadBatch bounds the frames read before due ones are sent, so
	// a flood cannot hold up departures.
	delayReadBatch = 256
)

func validDelay(d time.Duration) error {
	if d < 0 || d > MaxDelay {
		return fmt.Errorf("netlab: delay %v outside 0..%v", d, MaxDelay)
	}
	return nil
}

// delayLine is one port's delay: the tap, the BPF programs' map and the
// thread that holds the frames.
type delayLine struct {
	log       *slog.Logger
	port      string // for messages
	tapFd     int
	tap       *port // the tap as a port, for its rate limit
	tapMAC    [6]byte
	wakeFd    int // eventfd that stops the thread
	mapFd     int // u64 at key 0: redirect into the line when non-zero
	frameSize int
	epoch     time.Time
	// monoOffset is CLOCK_MONOTONIC minus now(), rounded down, to read
	// the programs' stamps on the line's clock.
	monoOffset int64
	delay      atomic.Int64 // nanoseconds, read by the thread per frame
	done       chan struct{}
	forwarded  atomic.Uint64
	dropped    atomic.Uint64
}

// setDelay sets the delay of traffic leaving p, making the line on first
// use. With d == 0 the line stops taking new packets; frames already in it
// still leave at their due time, so packets sent just after such a change
// may overtake them.
func (p *port) setDelay(d time.Duration, log *slog.Logger) error {
	if p.delay == nil {
		if d == 0 {
			return nil
		}
		l, err := newDelayLine(p, log)
		if err != nil {
			return err
		}
		p.delay = l
	}
	if err := p.delay.set(d); err != nil {
		return fmt.Errorf("netlab: %s: set delay: %w", p, err)
	}
	return nil
}

// newDelayLine builds p's delay line, redirecting nothing until set. On
// error nothing is left running or open (a clsact qdisc it added to p stays
// until the port is removed).
func newDelayLine(p *port, log *slog.Logger) (_ *delayLine, err error) {
	l := &delayLine{log: log, port: p.String(), tapFd: -1, wakeFd: -1, mapFd: -1,
		frameSize: p.mtu + 64, epoch: time.Now()}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.close())
		}
	}()
	if l.monoOffset, err = l.clockOffset(); err != nil {
		return nil, fmt.Errorf("netlab: %s: delay line clock: %w", p, err)
	}
	if l.mapFd, err = bpfArrayMap(8, 1); err != nil {
		return nil, fmt.Errorf("netlab: %s: delay line: %w", p, err)
	}
	if err := l.openTap(p); err != nil {
		return nil, err
	}
	if l.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("netlab: %s: delay line eventfd: %w", p, err)
	}
	// Frames coming out of the line go back to the port's egress.
	if err := attachProgram(p.ns.nl, l.tap.index, netlink.HANDLE_MIN_INGRESS, delayPriority,
		"netlab_dl_out", delayReturnProgram(p.index)); err != nil {
		return nil, fmt.Errorf("netlab: %s: delay line: %w", p, err)
	}
	l.done = make(chan struct{})
	go l.run()
	if err := p.ensureClsact(); err != nil {
		return nil, err
	}
	if err := attachProgram(p.ns.nl, p.index, netlink.HANDLE_MIN_EGRESS, delayPriority,
		"netlab_dl_in", delayProgram(l.mapFd, l.tap.index)); err != nil {
		return nil, fmt.Errorf("netlab: %s: delay line: %w", p, err)
	}
	return l, nil
}

// clockOffset measures CLOCK_MONOTONIC (the programs' stamps) minus now().
// now() read after the clock makes it an underestimate, so stamps look
// younger, not older, than they are; of a few tries it keeps the one with
// the least time between the readings (a preemption there would make the
// error large, and more stamps would look like they came from the future).
func (l *delayLine) clockOffset() (int64, error) {
	var best, offset int64 = math.MaxInt64, 0
	for range 8 {
		var mono unix.Timespec
		before := l.now()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
			return 0, err
		}
		after := l.now()
		if gap := int64(after - before); gap < best {
			best, offset = gap, mono.Nano()-int64(after)
		}
	}
	return offset, nil
}

// openTap creates the line's tap inside p's namespace (a tap is created in
// the namespace of the thread that asks), sized like the port and up, with
// a clsact qdisc for the return program. The device lives as long as tapFd.
func (l *delayLine) openTap(p *port) error {
	err := onThread(p.ns.enter, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
				return fmt.Errorf("open /dev/net/tun (CONFIG_TUN): %w: %w", errors.ErrUnsupported, err)
			}
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		l.tapFd = fd
		ifr, err := unix.NewIfreq(delayTapName)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("create tap %s: %w", delayTapName, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("netlab: %s: delay line: %w", p, err)
	}
	tap, err := p.ns.nl.LinkByName(delayTapName)
	if err != nil {
		return fmt.Errorf("netlab: %s: find tap: %w", p, err)
	}
	l.tap = &port{ns: p.ns, name: delayTapName, index: tap.Attrs().Index, mtu: p.mtu, up: true}
	copy(l.tapMAC[:], tap.Attrs().HardwareAddr)
	if err := errors.Join(p.ns.nl.LinkSetMTU(tap, p.mtu), p.ns.nl.LinkSetTxQLen(tap, delayTapQueue),
		p.ns.nl.LinkSetUp(tap)); err != nil {
		return fmt.Errorf("netlab: %s: configure tap: %w", p, err)
	}
	if err := p.ns.nl.QdiscAdd(clsactOf(l.tap.index)); err != nil {
		return fmt.Errorf("netlab: %s: tap clsact qdisc: %w", p, err)
	}
	return l.setRate(p.shape.rate)
}

// setRate limits what enters the line to the port's rate, with the same
// tbf: the excess is then dropped as it is sent, as without a delay,
// instead of queueing for the line's thread first and being dropped by the
// port's tbf after the delay (which would also let a sender faster than the
// thread build a hidden queue in front of the limit). The port keeps its
// own tbf for when the line is off; behind the line it has nothing to do.
// The entry stamp is tag metadata, not frame bytes, so both count the same
// lengths.
func (l *delayLine) setRate(rate uint64) error {
	l.tap.shape.rate = rate
	return l.tap.applyShaping()
}

// attachProgram loads insns and attaches them as a direct-action filter.
// The filter keeps the program (and the program its maps) alive.
func attachProgram(nl *netlink.Handle, index int, parent uint32, prio uint16, name string, insns []bpfInsn) error {
	fd, err := bpfLoadSchedCls(name, insns)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := nl.FilterAdd(bpfFilter(index, parent, prio, fd, name)); err != nil {
		return fmt.Errorf("attach %s: %w", name, err)
	}
	return nil
}

// delayProgram, on the port's egress, sends each packet into the line
// (the tap's egress) while the map says so, except packets coming out of
// it, which go on to the next filter. It stamps each packet with the time
// it entered, as an 802.1ad tag whose 16-bit TCI is CLOCK_MONOTONIC in
// units of 2^stampShift ns, so that the line's thread waking late to read
// it does not lengthen its delay. The tap hands the tag over in the frame.
func delayProgram(mapFd, tapIndex int) []bpfInsn {
	const r0, r1, r2, r3, r6, r10 = 0, 1, 2, 3, 6, 10
	return []bpfInsn{
		{op: opMov64Reg, dst: r6, src: r1},                     // 0
		{op: opLdxW, dst: r2, src: r6, off: skbIngressIfindex}, // 1
		{op: opJeqImm, dst: r2, imm: int32(tapIndex), off: 20}, // from the line: pass (-> 23)
		{op: opStW, dst: r10, off: -4, imm: 0},
		{op: opLdImm64, dst: r1, src: pseudoMapFd, imm: int32(mapFd)}, // 4
		{},
		{op: opMov64Reg, dst: r2, src: r10}, // 6
		{op: opAdd64Imm, dst: r2, imm: -4},
		{op: opCall, imm: fnMapLookup},
		{op: opJeqImm, dst: r0, imm: 0, off: 13}, // no value: pass (-> 23)
		{op: opLdxDW, dst: r1, src: r0},          // 10
		{op: opJeqImm, dst: r1, imm: 0, off: 11}, // line off: pass (-> 23)
		{op: opCall, imm: fnKtimeGetNs},
		{op: opRsh64Imm, dst: r0, imm: stampShift},
		{op: opAnd64Imm, dst: r0, imm: 0xffff},
		{op: opMov64Reg, dst: r3, src: r0}, // 15
		{op: opMov64Imm, dst: r2, imm: int32(htons(ethP8021AD))},
		{op: opMov64Reg, dst: r1, src: r6},
		{op: opCall, imm: fnSkbVlanPush}, // on failure the frame goes unstamped
		{op: opMov64Imm, dst: r1, imm: int32(tapIndex)},
		{op: opMov64Imm, dst: r2, imm: 0}, // 20
		{op: opCall, imm: fnRedirect},     // TC_ACT_REDIRECT to the tap's egress
		{op: opExit},
		{op: opMov64Imm, dst: r0, imm: tcActUnspec}, // 23
		{op: opExit},
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// delayReturnProgram, on the tap's ingress, sends everything the line
// writes to the port's egress.
func delayReturnProgram(portIndex int) []bpfInsn {
	const r1, r2 = 1, 2
	return []bpfInsn{
		{op: opMov64Imm, dst: r1, imm: int32(portIndex)},
		{op: opMov64Imm, dst: r2, imm: 0},
		{op: opCall, imm: fnRedirect},
		{op: opExit},
	}
}

// set changes the delay of frames entering the line from now on and turns
// the redirect on (d > 0) or off.
func (l *delayLine) set(d time.Duration) error {
	l.delay.Store(int64(d))
	v := make([]byte, 8)
	if d > 0 {
		binary.NativeEndian.PutUint64(v, 1)
	}
	return bpfMapUpdate(l.mapFd, 0, v)
}

// counters reports frames the line sent on and frames it dropped (full, or
// a write failed).
func (l *delayLine) counters() (forwarded, dropped uint64) {
	return l.forwarded.Load(), l.dropped.Load()
}

// now is the line's clock: monotonic, like ppoll's timeout.
func (l *delayLine) now() time.Duration { return time.Since(l.epoch) }

// run is the line's thread: read frames as they arrive, write each back
// when due, until woken through wakeFd.
func (l *delayLine) run() {
	defer close(l.done)
	// Never unlocked: the thread's timer slack is changed below, so it
	// must end with this goroutine rather than serve others.
	runtime.LockOSThread()
	// Default slack (50 µs) would make every departure late by up to that.
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		l.log.Debug("netlab: delay line timer slack", "port", l.port, "err", err)
	}
	q := newFrameQueue(delayQueueBytes)
	var timer departureTimer
	fds := []unix.PollFd{
		{Fd: int32(l.tapFd), Events: unix.POLLIN},
		{Fd: int32(l.wakeFd), Events: unix.POLLIN},
	}
	var ts unix.Timespec
	for {
		var timeout *unix.Timespec
		target := time.Duration(-1)
		if due, ok := q.next(); ok {
			now := l.now()
			wake := timer.wakeAt(due, now)
			if wake <= now {
				if rest := due - now; rest <= 0 || timer.spinFor(rest, now) {
					// Take in what has arrived first: a steady flow
					// can keep the thread here, off ppoll, for a while.
					l.receive(q)
					for l.now() < due {
						// Spin: the timer would be late.
					}
					l.send(q)
					continue
				}
				wake = due
			}
			target = wake
			ts = unix.NsecToTimespec(int64(wake - now))
			timeout = &ts
		}
		fds[0].Revents, fds[1].Revents = 0, 0
		n, err := unix.Ppoll(fds, timeout, nil)
		if err != nil && !errors.Is(err, unix.EINTR) {
			l.log.Warn("netlab: delay line stopped", "port", l.port, "err", err)
			return
		}
		if n == 0 && err == nil && target >= 0 {
			timer.observe(target, l.now())
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
			l.log.Warn("netlab: delay line tap failed", "port", l.port, "revents", fds[0].Revents)
			return
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			l.receive(q)
		}
	}
}

// receive reads up to delayReadBatch frames and queues them.
func (l *delayLine) receive(q *frameQueue) {
	for range delayReadBatch {
		buf := q.buffer(l.frameSize)
		n, err := unix.Read(l.tapFd, buf)
		if err != nil || n <= 0 {
			q.recycle(buf)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil && !errors.Is(err, unix.EAGAIN):
				l.dropped.Add(1) // e.g. a frame larger than the buffer
			}
			return
		}
		frame := buf[:n]
		// The tap's own traffic (it is up, so IPv6 may solicit routers
		// from it) is not the port's.
		if n < 12 || [6]byte(frame[6:12]) == l.tapMAC {
			q.recycle(buf)
			continue
		}
		frame, entered := readStamp(frame, l.now(), l.monoOffset)
		if !q.push(entered, time.Duration(l.delay.Load()), frame) {
			q.recycle(buf)
			l.dropped.Add(1)
		}
	}
}

// send writes every frame that is due.
func (l *delayLine) send(q *frameQueue) {
	now := l.now()
	for {
		frame, ok := q.pop(now)
		if !ok {
			return
		}
		if _, err := unix.Write(l.tapFd, frame); err != nil {
			l.dropped.Add(1)
		} else {
			l.forwarded.Add(1)
		}
		q.recycle(frame)
	}
}

// close stops the thread, then closes the tap (which removes the device
// with its qdisc and filter), the eventfd and the map. It is idempotent.
func (l *delayLine) close() error {
	var errs []error
	if l.done != nil {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		if _, err := unix.Write(l.wakeFd, one[:]); err != nil {
			errs = append(errs, fmt.Errorf("netlab: %s: stop delay line: %w", l.port, err))
		} else {
			<-l.done
		}
		l.done = nil
	}
	for _, fd := range []*int{&l.tapFd, &l.wakeFd, &l.mapFd} {
		if *fd < 0 {
			continue
		}
		if err := unix.Close(*fd); err != nil {
			errs = append(errs, fmt.Errorf("netlab: %s: close delay line fd: %w", l.port, err))
		}
		*fd = -1
	}
	return errors.Join(errs...)
}
