package hotplug

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/digitalocean/go-qemu/qmp"
)

// maxLine is the longest line go-qemu's reader takes (bufio.Scanner's
// default token limit, line end excluded). A longer line kills its
// reader (go-qemu issue #159).
const maxLine = bufio.MaxScanTokenSize - 1

// handshakeLines is how many lines go-qemu's Connect reads with its own
// decoder (greeting, qmp_capabilities reply); its reader takes the rest.
// A json.Decoder keeps whatever it read past the value it decoded, so
// the tap gives it no byte past a handshake line until Connect has used
// the line (advance).
const handshakeLines = 2

// errLineTooLong is what the tap reports for a line go-qemu cannot read.
var errLineTooLong = fmt.Errorf("%w: a line longer than %d bytes (go-qemu's limit)", ErrProtocol, maxLine)

// tap reads QEMU's connection for go-qemu's SocketMonitor, through the
// proxy (proxy.go), which writes what the tap hands out to go-qemu's
// socket. go-qemu has no deadlines, no way to close the socket while
// Connect blocks, drops an error reply's class and any line it cannot
// decode, and hands Run a slice of its scanner's buffer that its reader
// goroutine may overwrite with the next read. tap reads for it and:
//
//   - hands out one line (or part of one) per call and, after a reply,
//     holds further reads until release (the Run that got the reply is
//     done with it); likewise after each handshake line until Connect
//     has used it (advance);
//   - keeps each reply go-qemu will take, whole and in order, for the
//     Client (takeReply): go-qemu itself is given a stand-in;
//   - counts lines that are not QMP and records how the stream ended, so
//     errors can say what the peer did;
//   - reports the first read error and over-long line to onError.
type tap struct {
	net.Conn
	onError func(error) // called once, without mu held

	rbuf []byte // read from Conn, only by the one reading goroutine

	mu       sync.Mutex
	cond     *sync.Cond
	pending  []byte // read, not yet handed out
	pendErr  error  // Conn's error, to return once pending is empty
	cur      []byte // the line being handed out
	lines    int
	held     bool // a reply was handed out; reads wait for release
	stage    int  // handshake lines go-qemu's Connect has used (advance)
	closed   bool
	reported bool // onError called
	greeting *message
	greetErr error
	greetRaw []byte
	capsErr  error    // the second line is not QMP
	replies  [][]byte // lines go-qemu takes for replies, not yet taken
	junk     int      // lines that are not QMP
	lastJunk string
	long     bool
	readErr  error
	tail     []byte // partial line when reading ended
}

func newTap(c net.Conn, onError func(error)) *tap {
	t := &tap{Conn: c, onError: onError, rbuf: make([]byte, 4096)}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// Read is next without its reply flag.
func (t *tap) Read(p []byte) (int, error) {
	n, _, err := t.next(p)
	return n, err
}

// next hands out the next bytes from QEMU, up to the end of a line;
// reply says they end a line go-qemu takes for a reply past the
// handshake (kept for takeReply). A line longer than maxLine ends the
// stream with errLineTooLong.
func (t *tap) next(p []byte) (n int, reply bool, err error) {
	t.mu.Lock()
	for t.held && !t.closed {
		t.cond.Wait()
	}
	if t.closed {
		t.mu.Unlock()
		return 0, false, t.end(net.ErrClosed)
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
		return 0, false, t.end(err)
	}
	// One line at a time: nothing is handed out after a reply until
	// release.
	chunk := t.pending
	if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
		chunk = chunk[:i+1]
	}
	n = copy(p, chunk)
	t.pending = t.pending[n:]
	replies := len(t.replies)
	tooLong := t.take(p[:n])
	reply = len(t.replies) > replies
	t.mu.Unlock()
	if tooLong {
		t.report(errLineTooLong)
		return 0, false, errLineTooLong
	}
	return n, reply, nil
}

// take follows the bytes handed out line by line.
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
	switch {
	case t.lines <= handshakeLines:
		// Connect's decoder stops after a JSON value and keeps what it
		// read past it: hold until Connect has used the line.
		t.held = t.stage < t.lines && json.Valid(l)
	case goQEMUReply(l):
		// go-qemu gets a stand-in, and nothing past it until release.
		t.held = true
		t.replies = append(t.replies, bytes.Clone(l))
	}
	m, err := parseMessage(l)
	if t.lines == 1 {
		t.greetRaw = bytes.Clone(l)
		if err == nil && m.kind != kindGreeting {
			err = fmt.Errorf("%w: first message is not a greeting", errNotQMP)
		}
		t.greeting, t.greetErr = &m, err
		return
	}
	if err != nil {
		if t.lines == handshakeLines && t.capsErr == nil {
			t.capsErr = fmt.Errorf("%s: %w", quote(l), err)
		}
		if len(bytes.TrimSpace(l)) > 0 {
			t.junk++
			t.lastJunk = quote(l)
		}
	}
}

// advance notes how many handshake lines go-qemu's Connect has used: 1
// once it sends qmp_capabilities (it has decoded the greeting), 2 once
// Connect has returned. It ends a hold on those lines.
func (t *tap) advance(stage int) {
	t.mu.Lock()
	t.stage = max(t.stage, stage)
	if t.held && t.lines <= t.stage {
		t.held = false
		t.cond.Broadcast()
	}
	t.mu.Unlock()
}

// goQEMUReply is go-qemu's test (socket.go listen) for a line that goes
// to Run rather than to Events: it decodes into qmp.Event without an
// event name.
func goQEMUReply(l []byte) bool {
	var e qmp.Event
	return json.Unmarshal(l, &e) == nil && e.Event == ""
}

// release lets go-qemu read on after the Run that got a reply is done
// with it (with go-qemu's copy of its stand-in).
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

// end records how the stream ended (reading or sending) and returns err.
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

// ended returns how the stream ended, unless we closed it.
func (t *tap) ended() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.readErr
}

// takeReply returns and forgets the oldest reply go-qemu was given a
// stand-in for: the one its last Run returned.
func (t *tap) takeReply() ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.replies) == 0 {
		return nil, false
	}
	r := t.replies[0]
	t.replies = t.replies[1:]
	return r, true
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
