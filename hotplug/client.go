package hotplug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// Options tune a Client; zero fields take the defaults.
type Options struct {
	// ConnectTimeout bounds dialing, the greeting and capabilities
	// negotiation (default 5s), within the context's deadline.
	ConnectTimeout time.Duration
	// CommandTimeout bounds the wait for each command's reply (default
	// 10s), within the context's deadline.
	CommandTimeout time.Duration
	// RollbackTimeout bounds undoing a failed Attach (default 10s). The
	// undo runs even if the caller's context has ended.
	RollbackTimeout time.Duration
	// UnplugTimeout bounds the wait for DEVICE_DELETED after device_del
	// (default 60s), within the context's deadline.
	UnplugTimeout time.Duration
	// Logger gets what Attach and Detach do; nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = 10 * time.Second
	}
	if o.RollbackTimeout <= 0 {
		o.RollbackTimeout = 10 * time.Second
	}
	if o.UnplugTimeout <= 0 {
		o.UnplugTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Client is one QMP connection to a running QEMU, through go-qemu's
// SocketMonitor. Its methods may be called from several goroutines; they
// run one at a time. A reply that does not come in time, or one out of
// step with its command, closes the connection (QMP has only order to
// match replies to commands, so a late reply would be taken as the next
// command's): later calls fail with ErrClosed; Dial again.
type Client struct {
	path string
	opts Options
	log  *slog.Logger
	mon  *qmp.SocketMonitor
	px   *proxy
	tap  *tap // px.tap
	seq  atomic.Uint64

	version      Version
	capabilities []string

	ops sync.Mutex // one command or Attach/Detach at a time

	mu      sync.Mutex
	broken  error         // why the connection is gone; wraps ErrClosed
	dead    chan struct{} // closed when broken is set
	waiters map[*waiter]struct{}

	pumpDone  chan struct{}
	closeOnce sync.Once
}

// errOutOfStep marks a reply that is not the answer to the command
// just sent.
var errOutOfStep = fmt.Errorf("%w: reply out of step with its command", ErrProtocol)

// Dial connects to QEMU's QMP socket (-qmp unix:PATH,server=on,wait=off)
// and negotiates capabilities. A peer that does not answer, or not as
// QEMU does, gives an error within opts.ConnectTimeout or ctx's
// deadline, whichever is first.
func Dial(ctx context.Context, qmpSocket string, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	c, err := dial(ctx, qmpSocket, opts)
	if errors.Is(err, errOutOfStep) {
		// go-qemu takes an event that comes before the qmp_capabilities
		// reply for the reply (its PR #210); the reply then answers our
		// first command. Rare; a second connection starts clean.
		opts.Logger.Warn("QMP reply stream out of step after the handshake; reconnecting", "socket", qmpSocket, "err", err)
		c, err = dial(ctx, qmpSocket, opts)
	}
	return c, err
}

func dial(ctx context.Context, path string, opts Options) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	c := &Client{
		path:     path,
		opts:     opts,
		log:      opts.Logger.With("qmp", path),
		dead:     make(chan struct{}),
		waiters:  make(map[*waiter]struct{}),
		pumpDone: make(chan struct{}),
	}
	deadline := time.Now().Add(opts.ConnectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	mon, px, err := openMonitor(ctx, path, deadline, c.log, func(err error) {
		c.fail(fmt.Errorf("%w: connection lost: %v", ErrClosed, err))
	})
	if err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	c.mon, c.px, c.tap = mon, px, px.tap
	t := c.tap
	err = t.SetDeadline(deadline)
	if err == nil {
		px.start()
		// A deadline in the past fails the pending read at once.
		stop := context.AfterFunc(ctx, func() { t.SetDeadline(time.Unix(1, 0)) })
		err = mon.Connect()
		if e := t.ended(); err != nil && e != nil {
			// go-qemu saw the proxy close; the tap saw why.
			err = e
		}
		if !stop() && err == nil {
			err = ctx.Err()
		}
	}
	if err == nil {
		t.advance(handshakeLines)
		err = t.SetDeadline(time.Time{})
	}
	if err != nil {
		err = c.handshakeError(ctx, err, deadline)
		c.abandon()
		return nil, err
	}
	if c.version, c.capabilities, err = t.handshake(); err != nil {
		c.abandon()
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	// The event stream outlives Dial's ctx: it ends at Close.
	events, err := mon.Events(context.WithoutCancel(ctx))
	if err != nil {
		c.abandon()
		return nil, fmt.Errorf("QMP %s: events: %w", path, err)
	}
	go c.pump(events)
	// A first command checks that replies are in step (see Dial).
	if _, err := c.Execute(ctx, "query-version", nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	c.log.Debug("QMP connected", "qemu", c.version.String(), "capabilities", c.capabilities)
	return c, nil
}

// handshakeError says which part of the handshake failed and why.
func (c *Client) handshakeError(ctx context.Context, err error, deadline time.Time) error {
	lines, partial := c.tap.seen()
	if _, _, herr := c.tap.handshake(); herr != nil && (lines > 0 || partial) {
		return fmt.Errorf("QMP %s: %w", c.path, herr)
	}
	stage := "no reply to qmp_capabilities"
	if lines == 0 {
		// QEMU greets one client at a time; others wait in the backlog.
		stage = "no QMP greeting (is it a QMP socket? is another client connected?)"
	}
	var ne net.Error
	timedOut := errors.As(err, &ne) && ne.Timeout()
	ctxDeadline, fromCtx := ctx.Deadline()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("QMP %s: %s: %w", c.path, stage, ctx.Err())
	case timedOut && fromCtx && deadline.Equal(ctxDeadline):
		// The socket's deadline was the context's, whose own timer
		// may not have fired yet.
		return fmt.Errorf("QMP %s: %s: %w", c.path, stage, context.DeadlineExceeded)
	case timedOut:
		return fmt.Errorf("QMP %s: %s within %v: %w", c.path, stage, c.opts.ConnectTimeout, err)
	}
	if d := c.tap.diagnosis(); d != "" {
		return fmt.Errorf("QMP %s: handshake: %w (%s)", c.path, err, d)
	}
	// go-qemu turns an error reply into an error holding only its desc.
	return fmt.Errorf("QMP %s: %w: qmp_capabilities refused: %v", c.path, ErrProtocol, err)
}

// abandon closes a connection Dial gives up on.
func (c *Client) abandon() {
	c.fail(fmt.Errorf("%w: handshake failed", ErrClosed))
	c.mon.Disconnect()
	c.px.wait()
}

// Version is QEMU's version, from its greeting.
func (c *Client) Version() Version { return c.version }

// Close closes the connection. It does not change QEMU's state.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.fail(ErrClosed)
		// Disconnect drains go-qemu's reply channel so that its reader,
		// which ends on the closed socket, can exit and close the event
		// channel the pump ranges over.
		c.mon.Disconnect()
		<-c.pumpDone
		c.px.wait()
	})
	return nil
}

// fail marks the connection gone with cause (which wraps ErrClosed) and
// closes it, which ends a Run blocked on it. Only the first cause is kept.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	first := c.broken == nil
	if first {
		c.broken = cause
		close(c.dead)
	}
	c.mu.Unlock()
	if first {
		c.px.close()
	}
}

func (c *Client) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

// Execute runs one QMP command with arguments (nil, or anything that
// marshals to a JSON object) and returns its "return" value. An error
// reply gives a *QMPError.
func (c *Client) Execute(ctx context.Context, name string, args any) (json.RawMessage, error) {
	c.ops.Lock()
	defer c.ops.Unlock()
	return c.execute(ctx, name, args)
}

func (c *Client) execute(ctx context.Context, name string, args any) (json.RawMessage, error) {
	if err := c.err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	id := commandID(c.seq.Add(1))
	b, err := json.Marshal(command{Execute: name, Arguments: args, ID: id})
	if err != nil {
		return nil, fmt.Errorf("%w: %s arguments: %v", ErrInvalid, name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.opts.CommandTimeout)
	defer cancel()
	stop := context.AfterFunc(cctx, func() {
		c.fail(fmt.Errorf("%w after no reply to %s: %w", ErrClosed, name, cctx.Err()))
	})
	// go-qemu's Run gets a stand-in for the reply (proxy.go), which it
	// is done with when Run returns; the tap keeps the reply.
	_, runErr := c.mon.Run(b)
	c.tap.release()
	var reply []byte
	got := false
	if runErr == nil {
		reply, got = c.tap.takeReply()
	}
	if !stop() {
		err := fmt.Errorf("%s: no reply within %v: %w", name, c.opts.CommandTimeout, cctx.Err())
		if d := c.tap.diagnosis(); d != "" {
			err = fmt.Errorf("%w (%s)", err, d)
		}
		return nil, fmt.Errorf("%w; connection closed", err)
	}
	if runErr != nil {
		// The proxy closed go-qemu's socket: the tap says why, unless
		// go-qemu failed on its own.
		c.fail(fmt.Errorf("%w: go-qemu: %v", ErrClosed, runErr))
		return nil, c.lostDuring(name, c.err())
	}
	if !got {
		return nil, c.outOfStep(name, "go-qemu took a reply the tap did not see")
	}
	m, err := parseMessage(reply)
	if err != nil {
		return nil, c.outOfStep(name, fmt.Sprintf("reply %s: %v", quote(reply), err))
	}
	if rid, ok := m.idString(); m.kind != kindReply || !ok || rid != id {
		return nil, c.outOfStep(name, fmt.Sprintf("reply %s is not to %s", quote(reply), id))
	}
	if m.qerr != nil {
		qe := *m.qerr
		qe.Command = name
		return nil, &qe
	}
	return m.ret, nil
}

func (c *Client) outOfStep(name, detail string) error {
	err := fmt.Errorf("%s: %w: %s", name, errOutOfStep, detail)
	if d := c.tap.diagnosis(); d != "" {
		err = fmt.Errorf("%w (%s)", err, d)
	}
	c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
	return fmt.Errorf("%w; connection closed", err)
}

func (c *Client) lostDuring(name string, cause error) error {
	if d := c.tap.diagnosis(); d != "" {
		return fmt.Errorf("%s: %w (%s)", name, cause, d)
	}
	return fmt.Errorf("%s: %w", name, cause)
}

// waiter is one wait for an event.
type waiter struct {
	match func(qmp.Event) bool
	ch    chan struct{} // closed on the first match
	done  bool
}

// subscribe starts collecting events that match before the command that
// causes them is sent (QEMU may send the event before the reply).
func (c *Client) subscribe(match func(qmp.Event) bool) *waiter {
	w := &waiter{match: match, ch: make(chan struct{})}
	c.mu.Lock()
	c.waiters[w] = struct{}{}
	c.mu.Unlock()
	return w
}

func (c *Client) unsubscribe(w *waiter) {
	c.mu.Lock()
	delete(c.waiters, w)
	c.mu.Unlock()
}

// wait returns when w matched, ctx ended or the connection went.
func (c *Client) wait(ctx context.Context, w *waiter) error {
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.dead:
		select {
		case <-w.ch: // matched before the connection went
			return nil
		default:
			return c.err()
		}
	}
}

// pump drains go-qemu's event channel, which is unbuffered: once
// Events has been called, an undrained event stalls go-qemu's reader and
// with it every reply.
func (c *Client) pump(events <-chan qmp.Event) {
	defer close(c.pumpDone)
	for ev := range events {
		c.log.Debug("QMP event", "event", ev.Event, "data", ev.Data)
		c.mu.Lock()
		for w := range c.waiters {
			if !w.done && w.match(ev) {
				w.done = true
				close(w.ch)
			}
		}
		c.mu.Unlock()
	}
	c.fail(fmt.Errorf("%w: connection lost", ErrClosed))
}

// deviceDeleted matches QEMU's DEVICE_DELETED for qdev id. QEMU also
// sends one without "device" for each child (the virtio backend).
func deviceDeleted(id string) func(qmp.Event) bool {
	return func(ev qmp.Event) bool {
		dev, _ := ev.Data["device"].(string)
		return ev.Event == "DEVICE_DELETED" && dev == id
	}
}
