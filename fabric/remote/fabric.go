package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/hostnet"
	"github.com/vstellar/vstellar/latency"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/endpoint"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Errors, wrapped with the connection or GID they are about.
var (
	// ErrNoRoute: no peer's prefix holds the destination GID.
	ErrNoRoute = errors.New("remote: no peer serves the GID")
	// ErrIDInUse: the derived connection id is another live
	// connection's (a 32-bit collision, or the same QP pair twice).
	ErrIDInUse = errors.New("remote: connection id in use")
	// ErrNotRegistered: Connect for a local GID no device registered.
	ErrNotRegistered = errors.New("remote: local GID not registered")
	// ErrNotStreaming: the local GID's responder cannot take requests in
	// pieces (it does not implement fabric.StreamResponder).
	ErrNotStreaming = errors.New("remote: responder is not a fabric.StreamResponder")
	// ErrConnected: Connect for a QP connected to another peer.
	ErrConnected = errors.New("remote: QP connected elsewhere")
	// ErrClosed: the Fabric is closed.
	ErrClosed = errors.New("remote: fabric closed")
)

// Fabric is the cross-host fabric: fabric.Local for the GIDs of this host,
// and a transport connection per connected QP pair for the others.
type Fabric struct {
	cfg      Config
	log      *slog.Logger
	local    *fabric.Local
	sock     *udp.Conn
	ep       *endpoint.Endpoint
	overhead int
	rtt      []latency.Recorder // per path, for Stats

	// Read lock-free by Post; written under cmu, copy-on-write.
	regs   atomic.Pointer[map[abi.GID]fabric.Responder]
	conns  atomic.Pointer[map[fabric.Addr]*conn] // by the local QP
	routes atomic.Pointer[[]Peer]                // longest prefix first

	// cmu serialises the control calls (Register and its undo, Connect,
	// Disconnect, SetPeers, Close). Neither Post nor the loop takes it,
	// so holding it while waiting for the loop is safe.
	cmu    sync.Mutex
	closed bool

	rmu       sync.Mutex // Run's state
	running   bool
	stopped   bool // Close was called
	runCancel context.CancelFunc
	runDone   chan struct{}
}

var (
	_ fabric.Fabric    = (*Fabric)(nil)
	_ fabric.Connector = (*Fabric)(nil)
)

// New validates cfg and opens the socket. Run drives it. ctx bounds the
// setup (resolving cfg.Interface, opening the socket), not the Fabric's
// life: Close ends that.
func New(ctx context.Context, cfg Config) (*Fabric, error) {
	var ifc hostnet.Interface
	if cfg.Interface != "" {
		var err error
		if cfg, ifc, err = cfg.fromInterface(ctx); err != nil {
			return nil, err
		}
	}
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.Interface != "" && !ifc.Running {
		cfg.Log.Warn("remote fabric: interface not running (no carrier?): no traffic until it is", "interface", cfg.Interface, "state", ifc.OperState)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("remote: Listen %v: %w", cfg.Listen, err)
	}
	// The socket lives until Close, not until the caller's ctx ends
	// (udp.Listen closes it when its ctx is done).
	sock, err := udp.Listen(context.WithoutCancel(ctx), udp.Config{Addr: cfg.Listen, Interface: cfg.Interface, Paths: cfg.Paths,
		RecvBuffer: cfg.SocketBuffer, SendBuffer: cfg.SocketBuffer, Logger: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("remote: Listen %v: %w", cfg.Listen, err)
	}
	f := &Fabric{cfg: cfg, log: cfg.Log, local: fabric.NewLocal(), sock: sock, ep: endpoint.New(sock, cfg.Log), overhead: overhead(cfg.Listen),
		rtt: make([]latency.Recorder, cfg.Paths)}
	regs := map[abi.GID]fabric.Responder{}
	f.regs.Store(&regs)
	conns := map[fabric.Addr]*conn{}
	f.conns.Store(&conns)
	f.routes.Store(&cfg.Peers)
	f.log.Info("remote fabric listening", "addr", f.Addr(), "interface", cfg.Interface, "mtu", cfg.MTU, "paths", cfg.Paths, "gid_prefix", cfg.GIDPrefix, "peers", len(cfg.Peers))
	return f, nil
}

// Addr returns the bound address of path 0.
func (f *Fabric) Addr() netip.AddrPort { return f.sock.LocalAddr(0) }

// MTU returns the host network MTU the fabric sizes its packets for
// (Config.MTU, or the default it took).
func (f *Fabric) MTU() int { return f.cfg.MTU }

// Run drives the connections until ctx ends or Close is called (then it
// returns nil). It must run for as long as connections are to make
// progress: a request posted while it does not run completes only when
// its connection is disconnected.
func (f *Fabric) Run(ctx context.Context) error {
	f.rmu.Lock()
	switch {
	case f.stopped:
		f.rmu.Unlock()
		return fmt.Errorf("remote: Run: %w", ErrClosed)
	case f.running:
		f.rmu.Unlock()
		return errors.New("remote: Run: already running")
	}
	ctx2, cancel := context.WithCancel(ctx)
	f.running, f.runCancel, f.runDone = true, cancel, make(chan struct{})
	done := f.runDone
	f.rmu.Unlock()
	defer close(done)
	err := f.ep.Run(ctx2)
	f.rmu.Lock()
	stopped := f.stopped
	f.rmu.Unlock()
	cancel()
	if stopped && ctx.Err() == nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	return nil
}

// Close disconnects every connection (their requests complete
// OutcomeFlushed), stops Run and closes the socket.
func (f *Fabric) Close() error {
	f.cmu.Lock()
	if f.closed {
		f.cmu.Unlock()
		return nil
	}
	f.closed = true
	for _, c := range *f.conns.Load() {
		f.disconnect(c)
	}
	f.cmu.Unlock()
	f.rmu.Lock()
	f.stopped = true
	cancel, done := f.runCancel, f.runDone
	f.rmu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	if err := f.sock.Close(); err != nil {
		return fmt.Errorf("remote: close: %w", err)
	}
	f.log.Info("remote fabric closed", "addr", f.Addr())
	return nil
}

// Route returns the address of the peer serving gid: the peer whose
// prefix holds it, the longest if several do.
func (f *Fabric) Route(gid abi.GID) (netip.AddrPort, bool) {
	a := netip.AddrFrom16(gid)
	for _, p := range *f.routes.Load() {
		if p.GIDPrefix.Contains(a) {
			return p.Addr, true
		}
	}
	return netip.AddrPort{}, false
}

// SetPeers replaces the peers (validated as Config.Peers). It changes
// where later Connects go; live connections keep their peer.
func (f *Fabric) SetPeers(peers []Peer) error {
	ps, err := checkPeers(peers, f.cfg.GIDPrefix, f.cfg.Listen)
	if err != nil {
		return err
	}
	f.cmu.Lock()
	defer f.cmu.Unlock()
	f.routes.Store(&ps)
	return nil
}

// isLocal reports a GID of this host: in its prefix, or registered here.
func (f *Fabric) isLocal(gid abi.GID) bool {
	if _, ok := (*f.regs.Load())[gid]; ok {
		return true
	}
	return f.cfg.GIDPrefix.Contains(netip.AddrFrom16(gid))
}

// Register implements fabric.Fabric: r serves gid for this host's
// devices (through fabric.Local) and for connections from other hosts
// (which need r to be a fabric.StreamResponder). Unregistering also
// disconnects the connections of QPs sending from gid, so that r is not
// called again once it returns.
func (f *Fabric) Register(gid abi.GID, r fabric.Responder) (func(), error) {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("remote: register gid %x: %w", gid[:], ErrClosed)
	}
	unreg, err := f.local.Register(gid, r)
	if err != nil {
		return nil, err
	}
	regs := maps.Clone(*f.regs.Load())
	regs[gid] = r
	f.regs.Store(&regs)
	var once sync.Once
	return func() { once.Do(func() { f.unregister(gid, unreg) }) }, nil
}

func (f *Fabric) unregister(gid abi.GID, unreg func()) {
	f.cmu.Lock()
	regs := maps.Clone(*f.regs.Load())
	delete(regs, gid)
	f.regs.Store(&regs)
	for a, c := range *f.conns.Load() {
		if a.GID == gid {
			f.disconnect(c)
		}
	}
	f.cmu.Unlock()
	unreg() // waits for Local's calls in flight
}

// Connect implements fabric.Connector. The first call for a QP (at RTR)
// makes its transport connection, which takes the peer's stream from the
// QP's rq_psn on; the second (at RTS, Send set) starts the QP's own
// stream at its sq_psn, unless a response to the peer's READ or atomic
// started it already at the peer's rq_psn, and applies its retry_cnt and
// rnr_retry. A peer on this host needs nothing.
func (f *Fabric) Connect(c fabric.Connection) error {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	if f.closed {
		return fmt.Errorf("remote: connect %v: %w", c, ErrClosed)
	}
	r, ok := (*f.regs.Load())[c.Local.GID]
	if !ok {
		return fmt.Errorf("remote: connect %v: %w", c, ErrNotRegistered)
	}
	old := (*f.conns.Load())[c.Local]
	if f.isLocal(c.Remote.GID) {
		if old != nil {
			return fmt.Errorf("remote: connect %v: connected to %v: %w", c, old.remote, ErrConnected)
		}
		return nil // the in-process fabric carries it
	}
	if old != nil {
		if old.remote != c.Remote || old.tenant != c.Tenant {
			return fmt.Errorf("remote: connect %v: connected to %v tenant %d: %w", c, old.remote, old.tenant, ErrConnected)
		}
		return f.update(old, c)
	}
	sr, ok := r.(fabric.StreamResponder)
	if !ok {
		return fmt.Errorf("remote: connect %v: %w", c, ErrNotStreaming)
	}
	peer, ok := f.Route(c.Remote.GID)
	if !ok {
		return fmt.Errorf("remote: connect %v: gid %v: %w", c, netip.AddrFrom16(c.Remote.GID), ErrNoRoute)
	}
	// Packets are sized by the host network's MTU, not the QP's path
	// MTU: an RC message is delivered whole, so its segmentation is the
	// transport's own business (the guest cannot see it), and the path
	// MTU's 4096-byte ceiling would halve the payload per packet on a
	// 9000-byte network. Config.Validate checked the payload is enough.
	payload := min(f.cfg.Transport.MaxPayload, f.cfg.MTU-f.overhead)
	// Each stream starts at its QPs' PSN and has a token of its own
	// (ConnIdentity): the peer's from our rq_psn, ours from our sq_psn,
	// which comes only at RTS. Until then ours waits (SendLater), unless
	// the peer READs or does an atomic: its request names where it
	// expects our stream (its rq_psn), and the response starts it there
	// (StreamToken), as a QP in RTR answers on IB.
	id, token := identity(f.cfg.Secret, c.Tenant, c.Remote, c.Local, c.RQPSN)
	tc, err := f.cfg.policies(id)
	if err != nil {
		return fmt.Errorf("remote: connect %v: %w", c, err)
	}
	tc.Path = rttRecorder{PathSelector: tc.Path, paths: f.rtt}
	tc.Tenant = c.Tenant
	tc.LocalConn, tc.LocalToken, tc.RecvPSN = id, token, c.RQPSN
	tc.RemoteConn, tc.RemoteToken = identity(f.cfg.Secret, c.Tenant, c.Local, c.Remote, c.SQPSN)
	tc.MaxPayload = payload
	if c.Send {
		tc.SendPSN = c.SQPSN
		tc.RetryLimit, tc.RNRRetry = limits(c)
	} else {
		tc.SendLater = true
		secret, tenant, local, remote := f.cfg.Secret, c.Tenant, c.Local, c.Remote
		tc.StreamToken = func(psn uint32) uint64 {
			_, token := identity(secret, tenant, local, remote, psn)
			return token
		}
	}
	cn := newConn(f, c, tc.LocalConn, sr)
	t, err := transport.NewConn(tc, &cn.sink)
	if err != nil {
		return fmt.Errorf("remote: connect %v: %w", c, err)
	}
	if err := f.ep.Add(tc.LocalConn, t, peer, f.cfg.Paths, cn.done); err != nil {
		if errors.Is(err, endpoint.ErrExists) {
			return fmt.Errorf("remote: connect %v: id %#x: %w", c, tc.LocalConn, ErrIDInUse)
		}
		return fmt.Errorf("remote: connect %v: %w", c, err)
	}
	conns := maps.Clone(*f.conns.Load())
	conns[c.Local] = cn
	f.conns.Store(&conns)
	f.log.Debug("remote: connected", "conn", c, "peer", peer, "id", tc.LocalConn, "payload", payload)
	return nil
}

// update applies a later Connect of a connected QP (c names the same
// peer and tenant): at RTS the QP's own stream starts at its sq_psn, and
// its retry limits apply from then on. A stream that has started keeps
// its PSN: a new sq_psn (SQD to RTS) or rq_psn would need a new
// incarnation of the connection, which only RESET makes. Called with cmu.
func (f *Fabric) update(cn *conn, c fabric.Connection) error {
	if c.RQPSN != cn.rqPSN {
		f.log.Debug("remote: rq_psn of a connected QP changed: kept", "conn", c, "rq_psn", cn.rqPSN)
	}
	if !c.Send {
		return nil
	}
	switch {
	case !cn.sending:
		_, token := identity(f.cfg.Secret, c.Tenant, c.Local, c.Remote, c.SQPSN)
		if err := f.ep.StartSend(cn.id, c.SQPSN, token); err != nil {
			return fmt.Errorf("remote: connect %v: %w", c, err)
		}
		cn.sending, cn.sqPSN = true, c.SQPSN
	case c.SQPSN != cn.sqPSN:
		f.log.Debug("remote: sq_psn of a sending QP changed: kept", "conn", c, "sq_psn", cn.sqPSN)
	}
	retry, rnr := limits(c)
	if err := f.ep.SetLimits(cn.id, retry, rnr); err != nil {
		return fmt.Errorf("remote: connect %v: %w", c, err)
	}
	return nil
}

// limits maps a QP's retry_cnt and rnr_retry (0..7) onto the transport's
// (1..7; rnr_retry 7 is for ever in both).
func limits(c fabric.Connection) (retry, rnr int) {
	return min(max(1, int(c.RetryCnt)), 7), min(max(1, int(c.RNRRetry)), 7)
}

// Disconnect implements fabric.Connector: local's requests complete
// OutcomeFlushed before it returns, and its responder's Incomings are
// released and not called again.
func (f *Fabric) Disconnect(local fabric.Addr) {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	if c := (*f.conns.Load())[local]; c != nil {
		f.disconnect(c)
	}
}

// disconnect ends c. Called with cmu.
func (f *Fabric) disconnect(c *conn) {
	conns := maps.Clone(*f.conns.Load())
	delete(conns, c.local)
	f.conns.Store(&conns)
	c.close()
	f.log.Debug("remote: disconnected", "local", c.local, "remote", c.remote)
}

// Post implements fabric.Fabric. A destination on this host goes
// through fabric.Local (completing before Post returns); one elsewhere
// through the connection of req.Src, which must be connected to req.Dst
// (else OutcomeUnreachable at once). Post never waits for the I/O loop:
// it sends a small request itself when the endpoint is free
// (endpoint.Endpoint.Submit), which spares it the loop's wake-up, or
// queues it; the loop completes it later.
func (f *Fabric) Post(req *fabric.Request, c fabric.Completer) {
	if f.isLocal(req.Dst.GID) {
		f.local.Post(req, c)
		return
	}
	cn := (*f.conns.Load())[req.Src]
	if cn == nil || cn.remote != req.Dst {
		c.Complete(req, fabric.OutcomeUnreachable)
		return
	}
	cn.post(req, c)
}
