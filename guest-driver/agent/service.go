package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/rpc"
	"net/rpc/jsonrpc"
	"runtime"
	"sync"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Options tune a Service.
type Options struct {
	Log *slog.Logger
	// Ready is the device-ready time the guest program measured (from
	// its start to the driver's first completed command), for Info.
	Ready time.Duration
	// Doorbells says where the doorbell region lies in guest-physical
	// memory when the guest program knows (the shared-memory BAR's
	// address, or the guest-RAM area the driver registered), for Info
	// and the scenario that registers it.
	Doorbells func() (Region, bool)
	// CommandTimeout bounds each control command, and the wait for a
	// stopping stream's last completions (default 30 s: TCG guests are
	// slow).
	CommandTimeout time.Duration
	// MaxWait bounds every duration and timeout a request may ask for
	// (default 10 min).
	MaxWait time.Duration
	// Reboot, if set, serves the host's Reboot: the guest program
	// reboots the guest. It runs once the reply is written. Nil refuses
	// Reboot.
	Reboot func()
	// Reopen, if set, serves the host's Reopen (see lifecycle.go): it
	// closes the device, resets it, opens it again and returns the new
	// Device, which the Service serves from then on; on failure it
	// returns an error and no device. Nil refuses Reopen.
	Reopen func(ctx context.Context) (*guestdriver.Device, error)
}

// Service serves one opened device to a host. Its remote methods are
// those of the RPC type below; each may run concurrently with the
// others (net/rpc runs every request in its own goroutine).
type Service struct {
	o   Options
	log *slog.Logger

	// mu guards dev and st: Setup, Reset and Reopen hold it for
	// writing, everything that uses them holds it for reading while it
	// does.
	mu  sync.RWMutex
	dev *guestdriver.Device // nil once Forget or a failed Reopen dropped it
	st  *objects

	// loopMu guards loop: at most one loop (bandwidth, ping-pong, echo,
	// stream) at a time, since they own the send queue and its CQ.
	loopMu sync.Mutex
	loop   *loop
}

// objects are what Setup made.
type objects struct {
	pd  *guestdriver.PD
	scq *guestdriver.CQ
	rcq *guestdriver.CQ
	qp  *guestdriver.QP
	buf guestdriver.Buffer
	mr  *guestdriver.MR
}

// loop is the running loop.
type loop struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop has stopped
	stream *stream       // for a stream: its state, kept until StreamStop
}

// NewService returns a Service over dev, which the caller opened and
// closes after the Service.
func NewService(dev *guestdriver.Device, o Options) *Service {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = 30 * time.Second
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 10 * time.Minute
	}
	return &Service{dev: dev, o: o, log: o.Log.With("component", "agent")}
}

// Serve serves dev on conn with a new Service until the stream ends or
// breaks or ctx ends, then destroys what the host set up. conn is closed
// when it returns.
func Serve(ctx context.Context, dev *guestdriver.Device, conn io.ReadWriteCloser) error {
	s := NewService(dev, Options{})
	err := s.Serve(ctx, conn)
	// The teardown runs even when ctx's end is what stopped Serve.
	return errors.Join(err, s.Close(context.WithoutCancel(ctx)))
}

// Serve serves JSON-RPC requests from conn until the stream ends (EOF),
// holds bytes that are not JSON-RPC, or ctx ends; it waits for the
// requests in progress and closes conn. It returns ctx's error if ctx
// ended it. The objects the host set up stay for a later Serve (a host
// that reconnects finds them); Close destroys them.
func (s *Service) Serve(ctx context.Context, conn io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := rpc.NewServer()
	if err := srv.RegisterName(rpcName, &rpcAgent{s: s, ctx: ctx}); err != nil {
		conn.Close()
		return fmt.Errorf("agent: %w", err)
	}
	// Reads block: only closing the stream ends them.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	s.log.Info("serving")
	srv.ServeCodec(afterReply{ServerCodec: jsonrpc.NewServerCodec(conn), s: s})
	s.log.Info("stream ended")
	return context.Cause(ctx)
}

// rpcName is the service name in method names ("Agent.Setup").
const rpcName = "Agent"

// Close stops any loop and destroys what Setup made, within ctx and
// CommandTimeout.
func (s *Service) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.CommandTimeout)
	defer cancel()
	return s.reset(ctx)
}

// cmdCtx bounds one control operation.
func (s *Service) cmdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.o.CommandTimeout)
}

// wait converts a request's millisecond bound, checked against MaxWait.
func (s *Service) wait(what string, ms int, required bool) (time.Duration, error) {
	switch {
	case ms < 0 || (required && ms == 0):
		return 0, fmt.Errorf("%s of %d ms", what, ms)
	case int64(ms) > s.o.MaxWait.Milliseconds():
		return 0, fmt.Errorf("%s of %d ms exceeds %v", what, ms, s.o.MaxWait)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// use runs f with the objects, which stay while it runs.
func (s *Service) use(f func(o *objects) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.st == nil {
		return errors.New("not set up (call Setup)")
	}
	return f(s.st)
}

// info answers Info.
func (s *Service) info(ctx context.Context) (InfoReply, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.dev == nil {
		return InfoReply{}, errNoDevice
	}
	cfg := s.dev.Config()
	r := InfoReply{
		ABIVersion: cfg.ABIVersion, Status: cfg.Status, DoorbellMode: doorbellMode(cfg.Status),
		NodeGUID: cfg.NodeGUID, GID: s.dev.GID(), Limits: cfg.Limits,
		ReadyMicros: micros(s.o.Ready),
		Runtime:     fmt.Sprintf("%s %s/%s, %d CPUs", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
	}
	if s.o.Doorbells != nil {
		if db, ok := s.o.Doorbells(); ok {
			r.Doorbells = &db
		}
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	p, err := s.dev.QueryPort(ctx, guestdriver.Port)
	if err != nil {
		return r, err
	}
	r.PortState, r.ActiveMTU = p.State, p.ActiveMTU
	r.SetUp = s.st != nil
	return r, nil
}

func doorbellMode(status uint32) string {
	switch {
	case status&abi.ConfigStatusDoorbellShmem != 0:
		return "shmem"
	case status&abi.ConfigStatusDoorbellGuestRAM != 0:
		return "guest-ram"
	}
	return "none"
}

// setup answers Setup: a PD, a send and a receive CQ, an RC QP and one
// buffer registered as an MR.
func (s *Service) setup(ctx context.Context, a SetupArgs) (SetupReply, error) {
	a = withDefaults(a)
	if err := a.Access.Validate(); err != nil {
		return SetupReply{}, err
	}
	// A running loop holds the objects: refuse rather than wait for it.
	if err := s.idle(); err != nil {
		return SetupReply{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dev == nil {
		return SetupReply{}, errNoDevice
	}
	lim := s.dev.Limits()
	switch {
	case a.BufSize > 1<<30 || a.BufSize > lim.MaxMRSize:
		return SetupReply{}, fmt.Errorf("buffer of %d bytes (at most 1 GiB and the device's %d)", a.BufSize, lim.MaxMRSize)
	case a.CQEntries < 0 || uint64(a.CQEntries) > uint64(lim.MaxCQE):
		return SetupReply{}, fmt.Errorf("CQ of %d entries (device: %d)", a.CQEntries, lim.MaxCQE)
	}
	if s.st != nil {
		return SetupReply{}, errors.New("already set up (call Reset first)")
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	o := &objects{}
	err := o.create(ctx, s.dev, a)
	if err != nil {
		return SetupReply{}, errors.Join(err, o.destroy(ctx, s.dev))
	}
	s.st = o
	s.log.Info("set up", "qpn", o.qp.Num(), "buf", a.BufSize, "gpa", fmt.Sprintf("%#x", o.buf.GPA))
	return SetupReply{
		Endpoint: o.qp.Endpoint(),
		MR:       MRInfo{Addr: o.mr.IOVA(), RKey: o.mr.RKey(), Len: o.mr.Len()},
	}, nil
}

func withDefaults(a SetupArgs) SetupArgs {
	d := DefaultSetup
	if a.BufSize == 0 {
		a.BufSize = d.BufSize
	}
	if a.Access == 0 {
		a.Access = d.Access
	}
	if a.CQEntries == 0 {
		a.CQEntries = d.CQEntries
	}
	if a.Cap == (guestdriver.QPCap{}) {
		a.Cap = d.Cap
	}
	return a
}

func (o *objects) create(ctx context.Context, d *guestdriver.Device, a SetupArgs) error {
	var err error
	if o.pd, err = d.AllocPD(ctx); err != nil {
		return err
	}
	if o.scq, err = d.CreateCQ(ctx, a.CQEntries); err != nil {
		return err
	}
	if o.rcq, err = d.CreateCQ(ctx, a.CQEntries); err != nil {
		return err
	}
	if o.qp, err = o.pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: o.scq, RecvCQ: o.rcq, Cap: a.Cap}); err != nil {
		return err
	}
	if o.buf, err = d.Alloc(a.BufSize, 4096); err != nil {
		return err
	}
	o.mr, err = o.pd.RegMR(ctx, o.buf, a.Access)
	return err
}

// destroy undoes create, as far as it got, in reverse order.
func (o *objects) destroy(ctx context.Context, d *guestdriver.Device) error {
	var errs []error
	free := o.buf.Len() != 0
	if o.mr != nil {
		if err := o.mr.Dereg(ctx); err != nil {
			errs = append(errs, err)
			free = false // still registered: leaked rather than reused
		}
	}
	if free {
		d.Free(o.buf)
	}
	if o.qp != nil {
		errs = append(errs, o.qp.Destroy(ctx))
	}
	for _, cq := range []*guestdriver.CQ{o.scq, o.rcq} {
		if cq != nil {
			errs = append(errs, cq.Destroy(ctx))
		}
	}
	if o.pd != nil {
		errs = append(errs, o.pd.Dealloc(ctx))
	}
	return errors.Join(errs...)
}

// reset stops any loop and destroys the objects.
func (s *Service) reset(ctx context.Context) error {
	s.stopLoop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return nil
	}
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	err := s.st.destroy(ctx, s.dev)
	s.st = nil
	return err
}

// connect answers Connect: the QP from RESET to RTS against peer.
func (s *Service) connect(ctx context.Context, peer guestdriver.Endpoint) error {
	if peer.PSN >= 1<<24 {
		return fmt.Errorf("peer PSN %#x: more than 24 bits", peer.PSN)
	}
	return s.use(func(o *objects) error {
		ctx, cancel := s.cmdCtx(ctx)
		defer cancel()
		return o.qp.ConnectTo(ctx, peer)
	})
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
