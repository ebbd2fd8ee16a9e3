package hotplug

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/digitalocean/go-qemu/qmp"
)

// maxLine is the longest line go-qemu's reader takes (bufio.Scanner's
// default token limit, line end excluded). A longer line kills its
// reader (go-qemu issue #159).
const maxLine = bufio.MaxScanTokenSize - 1

// handshakeLines is how many lines go-qemu's Connect reads with its own
// decoder (greeting, qmp_capabilities reply); its reader takes the rest.
const handshakeLines = 2

// errLineTooLong is what the tap reports for a line go-qemu cannot read.
var errLineTooLong = fmt.Errorf("%w: a line longer than %d bytes (go-qemu's limit)", ErrProtocol, maxLine)

// tap is the connection under go-qemu's SocketMonitor. go-qemu has no
// deadlines, no way to close the socket while Connect blocks, drops an
// error reply's class and any line it cannot decode, and hands Run a
// slice of its scanner's buffer that its reader goroutine may overwrite
// with the next read. tap reads for it and:
//
//   - hands go-qemu one line per Read and, once go-qemu has a reply, holds
//     further reads until release (the Run that got the reply is done
//     with it), so the buffer is never overwritten under the caller;
//   - keeps error replies to our commands by id, with their class;
//   - counts lines that are not QMP and records how the stream ended, so
//     errors can say what the peer did;
//   - reports the first read error and over-long line to onError.
type tap struct {
	net.Conn
	onError func(error) // called once, without mu held

	rbuf []byte // read from Conn, only by the one reading goroutine

	mu       sync.Mutex
	cond     *sync.Cond
	pending  []byte // read, not yet handed to go-qemu
	pendErr  error  // Conn's error, to return once pending is empty
	cur      []byte // the line being handed over
	lines    int
	held     bool // a reply was handed over; reads wait for release
	closed   bool
	reported bool // onError called
	greeting *message
	greetErr error
	greetRaw []byte
	capsErr  error                // the second line is not QMP
	errs     map[string]*QMPError // error replies to our commands, by id
	junk     int                  // lines that are not QMP
	lastJunk string
	long     bool
	readErr  error
	tail     []byte // partial line when reading ended
}

func newTap(c net.Conn, onError func(error)) *tap {
	t := &tap{Conn: c, onError: onError, rbuf: make([]byte, 4096), errs: make(map[string]*QMPError)}
	t.cond = sync.NewCond(&t.mu)
	return t
}

func (t *tap) Read(p []byte) (int, error) {
	t.mu.Lock()
	for t.held && !t.closed {
		t.cond.Wait()
	}
	if t.closed {
		t.mu.Unlock()
		return 0, t.end(net.ErrClosed)
	}
	if len(t.pending) == 0 && t.pendErr == nil {
		t.mu.Unlock()
		n, err := t.Conn.Read(t.rbuf)
		t.mu.Lock()
		t.pending, t.pendErr = t.rbuf[:n], err
	}
	if len(t.pending) == 0 {
		err := t.pendErr
		t.mu.Unlock()
		return 0, t.end(err)
	}
	// One line at a time: the scanner then never holds bytes past the
	// line it returns, and nothing is read after a reply until release.
	chunk := t.pending
	if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
		chunk = chunk[:i+1]
	}
	n := copy(p, chunk)
	t.pending = t.pending[n:]
	tooLong := t.take(p[:n])
	t.mu.Unlock()
	if tooLong {
		t.report(errLineTooLong)
	}
	return n, nil
}

// take follows the bytes handed to go-qemu line by line.
func (t *tap) take(b []byte) (tooLong bool) {
	line, complete := bytes.CutSuffix(b, []byte("\n"))
	if !t.long {
		if len(t.cur)+len(line) > maxLine {
			t.long, t.cur = true, nil
			return true
		}
		t.cur = append(t.cur, line...)
	}
	if complete && !t.long {
		t.line(bytes.TrimSuffix(t.cur, []byte("\r")))
		t.cur = t.cur[:0]
	}
	return false
}

func (t *tap) line(l []byte) {
	t.lines++
	m, err := parseMessage(l)
	switch {
	case t.lines == 1:
		t.greetRaw = bytes.Clone(l)
		if err == nil && m.kind != kindGreeting {
			err = fmt.Errorf("%w: first message is not a greeting", errNotQMP)
		}
		t.greeting, t.greetErr = &m, err
		return
	case t.lines > handshakeLines && goQEMUReply(l):
		t.held = true
	}
	if err != nil {
		if t.lines == handshakeLines && t.capsErr == nil {
			t.capsErr = fmt.Errorf("%s: %w", quote(l), err)
		}
		if len(bytes.TrimSpace(l)) > 0 {
			t.junk++
			t.lastJunk = quote(l)
		}
		return
	}
	if m.kind == kindReply && m.qerr != nil {
		if id, ok := m.idString(); ok && strings.HasPrefix(id, idPrefix) {
			e := *m.qerr
			t.errs[id] = &e
		}
	}
}

// goQEMUReply is go-qemu's test (socket.go listen) for a line that goes
// to Run rather than to Events: it decodes into qmp.Event without an
// event name.
func goQEMUReply(l []byte) bool {
	var e qmp.Event
	return json.Unmarshal(l, &e) == nil && e.Event == ""
}

// release lets go-qemu read on after the Run that got a reply is done
// with it.
func (t *tap) release() {
	t.mu.Lock()
	t.held = false
	t.cond.Broadcast()
	t.mu.Unlock()
}

// close closes the connection and wakes a held reader.
func (t *tap) close() {
	t.mu.Lock()
	t.closed = true
	t.cond.Broadcast()
	t.mu.Unlock()
	t.Conn.Close()
}

// end records how reading ended and returns err.
func (t *tap) end(err error) error {
	t.mu.Lock()
	if t.readErr == nil && !t.closed { // not our own close
		t.readErr = err
		t.tail = bytes.Clone(t.cur)
	}
	t.mu.Unlock()
	t.report(err)
	return err
}

func (t *tap) report(err error) {
	t.mu.Lock()
	first := !t.reported
	t.reported = true
	t.mu.Unlock()
	if first && t.onError != nil {
		t.onError(err)
	}
}

// takeErr returns and forgets the error reply to command id.
func (t *tap) takeErr(id string) (*QMPError, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.errs[id]
	delete(t.errs, id)
	return e, ok
}

// handshake reports the greeting and what is wrong with the first
// lines, if anything.
func (t *tap) handshake() (Version, []string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.greeting == nil && t.long:
		return Version{}, nil, fmt.Errorf("%w: the greeting is longer than %d bytes", ErrProtocol, maxLine)
	case t.greeting == nil && len(t.cur) > 0:
		return Version{}, nil, fmt.Errorf("%w: no complete greeting, only %s", ErrProtocol, quote(t.cur))
	case t.greeting == nil:
		return Version{}, nil, fmt.Errorf("%w: no greeting", ErrProtocol)
	case t.greetErr != nil:
		return Version{}, nil, fmt.Errorf("%w: bad greeting %s: %v", ErrProtocol, quote(t.greetRaw), t.greetErr)
	case t.capsErr != nil:
		// go-qemu decoded the second line as the qmp_capabilities reply.
		return Version{}, nil, fmt.Errorf("%w: answer to qmp_capabilities is not QMP: %v", ErrProtocol, t.capsErr)
	}
	return t.greeting.version, t.greeting.capabilities, nil
}

// seen reports how many lines the peer sent and whether one was cut.
func (t *tap) seen() (lines int, partial bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lines, len(t.cur) > 0 || t.long
}

// diagnosis describes what the peer sent that go-qemu ignored or choked
// on, and how the stream ended; "" if nothing.
func (t *tap) diagnosis() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	if t.junk > 0 {
		parts = append(parts, fmt.Sprintf("the peer sent %d line(s) that are not QMP, the last %s", t.junk, t.lastJunk))
	}
	if t.long {
		parts = append(parts, fmt.Sprintf("the peer sent a line longer than %d bytes, go-qemu's limit", maxLine))
	}
	if t.readErr != nil {
		s := "the connection ended (" + t.readErr.Error() + ")"
		if len(t.tail) > 0 {
			s += " in the middle of a line: " + quote(t.tail)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// errGoQEMULayout means the pinned go-qemu changed: openMonitor cannot
// put the tap under its SocketMonitor.
var errGoQEMULayout = errors.New("go-qemu's SocketMonitor has no net.Conn field c (did the pinned version change?)")

// openMonitor dials the QMP socket with go-qemu and puts a tap under the
// monitor's connection. It reaches into an unexported field because
// go-qemu has no other way to bound Connect or to read safely; a test
// pins the field so that a go-qemu upgrade that moves it fails loudly.
func openMonitor(path string, timeout time.Duration, wrap func(net.Conn) *tap) (*qmp.SocketMonitor, *tap, error) {
	mon, err := qmp.NewSocketMonitor("unix", path, timeout)
	if err != nil {
		return nil, nil, err
	}
	t, err := swapConn(mon, wrap)
	if err != nil {
		mon.Disconnect()
		return nil, nil, err
	}
	return mon, t, nil
}

func swapConn(mon *qmp.SocketMonitor, wrap func(net.Conn) *tap) (*tap, error) {
	f := reflect.ValueOf(mon).Elem().FieldByName("c")
	if !f.IsValid() || f.Type() != reflect.TypeFor[net.Conn]() {
		return nil, errGoQEMULayout
	}
	conn := (*net.Conn)(unsafe.Pointer(f.UnsafeAddr()))
	t := wrap(*conn)
	*conn = t
	return t, nil
}
