package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"net/rpc/jsonrpc"
	"time"
)

// Client calls one guest's agent. Its methods are safe for concurrent
// use (a host runs Echo in one guest while PingPong runs in the other).
// Each call ends when the guest answers or ctx ends; without a deadline
// on ctx a call gets DefaultTimeout, or the loop's own duration plus
// that for the loops. A call whose ctx ended is not taken back: the
// guest still runs it, and its answer is dropped.
type Client struct {
	c *rpc.Client
	// Name is the guest's name in errors ("a", "vm0"); set it before
	// the first call.
	Name string
}

// DefaultTimeout is a call's deadline when its ctx has none.
const DefaultTimeout = 2 * time.Minute

// NewClient returns a Client speaking to the agent at the other end of
// conn, which it owns from then on.
func NewClient(conn io.ReadWriteCloser) *Client {
	return &Client{c: jsonrpc.NewClient(conn)}
}

// Close closes the connection; pending calls fail.
func (c *Client) Close() error { return c.c.Close() }

// call makes one call, bounded by ctx (or by extra plus DefaultTimeout
// if ctx has no deadline).
func (c *Client) call(ctx context.Context, method string, extra time.Duration, args, reply any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout+extra)
		defer cancel()
	}
	call := c.c.Go(rpcName+"."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
	case <-ctx.Done():
		return fmt.Errorf("agent%s: %s: %w", c.label(), method, context.Cause(ctx))
	}
	var se rpc.ServerError
	if errors.As(call.Error, &se) {
		return remoteError(c.Name, method, string(se))
	}
	if call.Error != nil {
		return fmt.Errorf("agent%s: %s: %w", c.label(), method, call.Error)
	}
	return nil
}

// get makes a call whose reply is R. The reply is fresh for each call
// and read only once the call is over: net/rpc writes a late answer
// into it after a call whose ctx ended.
func get[R any](ctx context.Context, c *Client, method string, extra time.Duration, args any) (R, error) {
	r := new(R)
	if err := c.call(ctx, method, extra, args, r); err != nil {
		var zero R
		return zero, err
	}
	return *r, nil
}

func (c *Client) label() string {
	if c.Name == "" {
		return ""
	}
	return " " + c.Name
}

func ms(d time.Duration) time.Duration { return d * time.Millisecond }

// Info describes the device and the agent.
func (c *Client) Info(ctx context.Context) (InfoReply, error) {
	return get[InfoReply](ctx, c, "Info", 0, &Empty{})
}

// Setup creates the verbs objects (zero args: DefaultSetup).
func (c *Client) Setup(ctx context.Context, a SetupArgs) (SetupReply, error) {
	return get[SetupReply](ctx, c, "Setup", 0, &a)
}

// Reset stops any loop and destroys what Setup made.
func (c *Client) Reset(ctx context.Context) error {
	_, err := get[Empty](ctx, c, "Reset", 0, &Empty{})
	return err
}

// Connect brings the QP to RTS against the peer's endpoint.
func (c *Client) Connect(ctx context.Context, peer SetupReply) error {
	_, err := get[Empty](ctx, c, "Connect", 0, &ConnectArgs{Peer: peer.Endpoint})
	return err
}

// Fill writes n bytes of Pattern(seed) at off.
func (c *Client) Fill(ctx context.Context, off, n, seed uint64) error {
	_, err := get[Empty](ctx, c, "Fill", 0, &FillArgs{Off: off, Len: n, Seed: seed})
	return err
}

// Store writes data (at most MaxIO bytes) at off.
func (c *Client) Store(ctx context.Context, off uint64, data []byte) error {
	_, err := get[Empty](ctx, c, "Store", 0, &StoreArgs{Off: off, Data: data})
	return err
}

// Read returns n bytes (at most MaxIO) at off.
func (c *Client) Read(ctx context.Context, off, n uint64) ([]byte, error) {
	r, err := get[ReadReply](ctx, c, "Read", 0, &RangeArgs{Off: off, Len: n})
	return r.Data, err
}

// Digest is the hex SHA-256 of the n bytes at off.
func (c *Client) Digest(ctx context.Context, off, n uint64) (string, error) {
	r, err := get[DigestReply](ctx, c, "Digest", 0, &RangeArgs{Off: off, Len: n})
	return r.SHA256, err
}

// PostSend posts send work requests.
func (c *Client) PostSend(ctx context.Context, wrs ...SendArgs) error {
	_, err := get[Empty](ctx, c, "PostSend", 0, &PostSendArgs{WRs: wrs})
	return err
}

// PostRecv posts receive work requests.
func (c *Client) PostRecv(ctx context.Context, wrs ...RecvArgs) error {
	_, err := get[Empty](ctx, c, "PostRecv", 0, &PostRecvArgs{WRs: wrs})
	return err
}

// Poll returns what a's CQ holds, waiting up to a.TimeoutMs for a.Min.
func (c *Client) Poll(ctx context.Context, a PollArgs) ([]Completion, error) {
	r, err := get[PollReply](ctx, c, "Poll", ms(time.Duration(a.TimeoutMs)), &a)
	return r.WCs, err
}

// PollN waits up to timeout for exactly n completions on q (more than n
// is an error too: something completed that should not have).
func (c *Client) PollN(ctx context.Context, q Queue, n int, timeout time.Duration) ([]Completion, error) {
	wcs, err := c.Poll(ctx, PollArgs{Queue: q, Min: n, Max: n + 1, TimeoutMs: int(timeout.Milliseconds())})
	if err != nil {
		return wcs, err
	}
	if len(wcs) != n {
		return wcs, fmt.Errorf("agent%s: %s CQ: %d completions, want %d: %v", c.label(), q, len(wcs), n, wcs)
	}
	return wcs, nil
}

// RegMRAt asks the device to register guest-physical memory; see
// RegMRAtArgs.
func (c *Client) RegMRAt(ctx context.Context, a RegMRAtArgs) (RegMRAtReply, error) {
	return get[RegMRAtReply](ctx, c, "RegMRAt", 0, &a)
}

// WriteBandwidth runs the WRITE bandwidth loop in the guest.
func (c *Client) WriteBandwidth(ctx context.Context, a BandwidthArgs) (BandwidthReply, error) {
	return get[BandwidthReply](ctx, c, "WriteBandwidth", ms(time.Duration(a.DurationMs)), &a)
}

// PingPong runs the ping-pong initiator in the guest (the peer must run
// Echo meanwhile).
func (c *Client) PingPong(ctx context.Context, a PingArgs) (PingReply, error) {
	return get[PingReply](ctx, c, "PingPong", ms(time.Duration(a.TimeoutMs)), &a)
}

// Echo runs the ping-pong responder in the guest.
func (c *Client) Echo(ctx context.Context, a EchoArgs) (EchoReply, error) {
	return get[EchoReply](ctx, c, "Echo", ms(time.Duration(a.TimeoutMs)), &a)
}

// StreamStart starts a WRITE stream; it returns once the first WRITE
// completed.
func (c *Client) StreamStart(ctx context.Context, a StreamArgs) error {
	_, err := get[Empty](ctx, c, "StreamStart", 0, &a)
	return err
}

// StreamStatus is the stream's progress.
func (c *Client) StreamStatus(ctx context.Context) (StreamStatus, error) {
	return get[StreamStatus](ctx, c, "StreamStatus", 0, &Empty{})
}

// StreamStop stops the stream and returns its result once every WRITE
// in flight completed.
func (c *Client) StreamStop(ctx context.Context) (StreamResult, error) {
	return get[StreamResult](ctx, c, "StreamStop", 0, &Empty{})
}
