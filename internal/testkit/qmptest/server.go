package qmptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Options configure a Server; zero fields take the defaults.
type Options struct {
	// Version is the QEMU version in the greeting; default 10.2.0.
	Version [3]int
	// Drivers are the device models device_add knows; default
	// vhost-user-test-device-pci and virtio-net-pci.
	Drivers []string
	// RootPorts are the ids of pcie-root-ports, each a bus for one
	// device; default rp0 and rp1. Use []string{} for none.
	RootPorts []string
	// RootHotplug lets devices be hot-plugged on the root bus (as on
	// i440fx "pc"); by default it refuses, as q35's pcie.0 does.
	RootHotplug bool
	// Unnumbered leaves the root ports' buses unnumbered: query-pci then
	// does not list devices behind them (a guest that has not booted).
	Unnumbered bool
	// DeleteDelay is the time from device_del to DEVICE_DELETED (the
	// guest releasing the device); default 10ms.
	DeleteDelay time.Duration
	// ChardevDir, if set, is the only directory whose sockets
	// chardev-add connects to (others are refused), to keep a fuzzed
	// client off the host's sockets.
	ChardevDir string
	// Logger gets the commands served; nil discards.
	Logger *slog.Logger
}

// Server is a QMP server on a unix socket.
type Server struct {
	opts Options
	path string
	ln   *net.UnixListener
	log  *slog.Logger
	wg   sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	faults   Faults
	cur      *conn // the client being served
	conns    int
	commands []string
	st       state
	timers   map[*time.Timer]struct{}
}

// conn is one client connection.
type conn struct {
	c          *net.UnixConn
	wmu        sync.Mutex
	negotiated bool // guarded by Server.mu
}

// Start listens on path (which must not exist) and serves.
func Start(path string, opts Options) (*Server, error) {
	if opts.Version == [3]int{} {
		opts.Version = [3]int{10, 2, 0}
	}
	if opts.Drivers == nil {
		opts.Drivers = []string{"vhost-user-test-device-pci", "virtio-net-pci"}
	}
	if opts.RootPorts == nil {
		opts.RootPorts = []string{"rp0", "rp1"}
	}
	if opts.DeleteDelay <= 0 {
		opts.DeleteDelay = 10 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("qmptest: %w", err)
	}
	s := &Server{
		opts:   opts,
		path:   path,
		ln:     ln,
		log:    opts.Logger.With("qmptest", path),
		st:     newState(opts),
		timers: make(map[*time.Timer]struct{}),
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving, closes the client and every chardev connection,
// and waits for the server's goroutines. The socket file is removed.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	cur := s.cur
	for t := range s.timers {
		if t.Stop() {
			s.wg.Done()
		}
	}
	s.timers = nil
	s.st.closeAll()
	s.mu.Unlock()
	err := s.ln.Close()
	if cur != nil {
		cur.c.Close()
	}
	s.wg.Wait()
	return err
}

// SetFaults replaces the faults; they apply from the next command (and
// greeting faults from the next connection).
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f.clone()
	s.mu.Unlock()
}

// Commands lists the commands received so far, in order.
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

// Connections counts the clients served so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Emit sends an event to the negotiated client, if there is one.
func (s *Server) Emit(name string, data map[string]any) error {
	s.mu.Lock()
	cur := s.cur
	ok := cur != nil && cur.negotiated
	s.mu.Unlock()
	if !ok {
		return errors.New("qmptest: no negotiated client")
	}
	return cur.writeLine(event(name, data))
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		cn := &conn{c: c}
		s.cur = cn
		s.conns++
		f := s.faults
		s.mu.Unlock()
		s.serve(cn, f)
		s.mu.Lock()
		s.cur = nil
		s.mu.Unlock()
		c.Close()
	}
}

// serve talks to one client until it goes or a fault hangs up.
func (s *Server) serve(cn *conn, f Faults) {
	switch {
	case f.NoGreeting:
	case f.Greeting != "":
		cn.writeRaw([]byte(f.Greeting + "\r\n"))
	default:
		v := s.opts.Version
		cn.writeLine(map[string]any{"QMP": map[string]any{
			"version":      map[string]any{"qemu": map[string]int{"major": v[0], "minor": v[1], "micro": v[2]}, "package": "qmptest"},
			"capabilities": []string{"oob"},
		}})
	}
	dec := json.NewDecoder(cn.c)
	for {
		var req map[string]json.RawMessage
		if err := dec.Decode(&req); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				// QEMU answers and resynchronises; a Decoder cannot.
				cn.writeLine(errReply(nil, genericf("JSON parse error, %v", err)))
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				cn.writeLine(errReply(nil, genericf("QMP input must be a JSON object")))
			}
			return
		}
		if !s.request(cn, req) {
			return
		}
	}
}

// request answers one command; false ends the connection.
func (s *Server) request(cn *conn, req map[string]json.RawMessage) bool {
	id := req["id"]
	var name string
	if err := json.Unmarshal(req["execute"], &name); err != nil || req["execute"] == nil {
		return cn.writeLine(errReply(id, genericf("QMP input lacks member 'execute'"))) == nil
	}
	for k := range req {
		if k != "execute" && k != "arguments" && k != "id" {
			return cn.writeLine(errReply(id, genericf("QMP input member '%s' is unexpected", k))) == nil
		}
	}
	args := req["arguments"]
	if args != nil && (len(bytes.TrimSpace(args)) == 0 || bytes.TrimSpace(args)[0] != '{') {
		return cn.writeLine(errReply(id, genericf("QMP input member 'arguments' must be an object"))) == nil
	}

	s.mu.Lock()
	s.commands = append(s.commands, name)
	fault, faulted := s.faults.Commands[name]
	negotiated := cn.negotiated
	beforeCaps := name == "qmp_capabilities" && !negotiated && s.faults.EventBeforeCapabilities > 0
	if beforeCaps {
		s.faults.EventBeforeCapabilities--
	}
	s.mu.Unlock()
	s.log.Debug("command", "execute", name, "fault", fault.Kind)

	if faulted && !fault.Execute {
		switch fault.Kind {
		case Refuse:
			return cn.writeLine(errReply(id, &Error{Class: fault.Class, Desc: fault.Desc})) == nil
		case Silent:
			return true
		case Garbage:
			return cn.writeRaw([]byte(fault.Raw+"\n")) == nil
		case HangUp:
			line, _ := json.Marshal(reply(id, map[string]any{}))
			cn.writeRaw(line[:len(line)/2])
			cn.waitRead()
			return false
		}
	}

	var ret any
	var qerr *Error
	switch {
	case name == "qmp_capabilities" && negotiated:
		qerr = &Error{Class: "CommandNotFound", Desc: "Capabilities negotiation is already complete, command ignored"}
	case name == "qmp_capabilities":
		ret = map[string]any{}
	case !negotiated:
		qerr = &Error{Class: "CommandNotFound", Desc: "Expecting capabilities negotiation with 'qmp_capabilities'"}
	default:
		ret, qerr = s.exec(name, args)
	}

	var msg map[string]any
	if qerr != nil {
		msg = errReply(id, qerr)
	} else {
		msg = reply(id, ret)
	}
	if faulted {
		switch fault.Kind {
		case Refuse:
			msg = errReply(id, &Error{Class: fault.Class, Desc: fault.Desc})
		case Silent:
			return true
		case Garbage:
			return cn.writeRaw([]byte(fault.Raw+"\n")) == nil
		case HangUp:
			line, _ := json.Marshal(msg)
			cn.writeRaw(line[:len(line)/2])
			cn.waitRead()
			return false
		case WrongID:
			msg["id"] = "qmptest-wrong-id"
		case Huge:
			n := fault.Size
			if n <= 0 {
				n = 70 << 10
			}
			msg["qmptest-padding"] = strings.Repeat("x", n)
		}
	}
	if name == "qmp_capabilities" && qerr == nil && !negotiated {
		if beforeCaps {
			// go-qemu PR #210: an event first, read on its own.
			cn.writeLine(event("RESUME", nil))
			cn.waitRead()
		}
		s.mu.Lock()
		cn.negotiated = msg["error"] == nil
		s.mu.Unlock()
	}
	return cn.writeLine(msg) == nil
}

func reply(id json.RawMessage, ret any) map[string]any {
	m := map[string]any{"return": ret}
	if id != nil {
		m["id"] = id
	}
	return m
}

func errReply(id json.RawMessage, e *Error) map[string]any {
	m := map[string]any{"error": map[string]string{"class": e.Class, "desc": e.Desc}}
	if id != nil {
		m["id"] = id
	}
	return m
}

func event(name string, data map[string]any) map[string]any {
	now := time.Now()
	m := map[string]any{
		"event":     name,
		"timestamp": map[string]int64{"seconds": now.Unix(), "microseconds": int64(now.Nanosecond() / 1000)},
	}
	if data != nil {
		m["data"] = data
	}
	return m
}

// writeTimeout keeps a client that stops reading from wedging the server.
const writeTimeout = 5 * time.Second

func (cn *conn) writeLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return cn.writeRaw(append(b, '\r', '\n'))
}

func (cn *conn) writeRaw(b []byte) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	cn.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := cn.c.Write(b)
	return err
}

// waitRead waits (up to writeTimeout) until the client has read all
// that was written: the socket's send queue (SIOCOUTQ) is empty. What is
// written next then reaches the client in a read of its own.
func (cn *conn) waitRead() {
	rc, err := cn.c.SyscallConn()
	if err != nil {
		return
	}
	for end := time.Now().Add(writeTimeout); time.Now().Before(end); time.Sleep(time.Millisecond) {
		n := -1
		rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		if n <= 0 {
			return
		}
	}
}
