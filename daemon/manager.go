package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/confcheck"
	"github.com/vstellar/vstellar/pvdma"
)

// Manager owns the devices of one daemon and its management API. Create
// it with New; it is safe for concurrent use.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	factory DeviceFactory
	shared  Shared // one fabric for every device of the daemon

	ready chan struct{} // closed when Run serves the API

	mu            sync.Mutex
	devices       map[string]*entry
	running       bool           // Run was called
	closing       bool           // Shutdown was called
	ops           sync.WaitGroup // in-flight creates and destroys
	dirPrepared   bool
	createdRunDir bool
	// remote is the cross-host fabric once started (startFabric), and
	// remoteStop stops it.
	remote     *remote.Fabric
	remoteStop func() error
}

type entryState int

const (
	stateCreating entryState = iota
	stateReady
	stateDestroying
)

// entry reserves a name in Manager.devices; dev is set once ready.
type entry struct {
	state entryState
	dev   *device
}

// New checks cfg and returns a Manager. It has no side effects: the run
// directory is created by Run or the first CreateDevice.
func New(cfg Config, log *slog.Logger) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if cfg.Factory == nil {
		return nil, errors.New("config: no device factory")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.RunDir = filepath.Clean(cfg.RunDir)
	cfg.Devices = slices.Clone(cfg.Devices)
	cores, err := engine.NewCores(engine.CoresConfig{CPUs: cfg.DataCores, Log: log})
	if err != nil {
		return nil, fmt.Errorf("config: %w", &confcheck.ConfigError{Path: "data_cores", Err: fmt.Errorf("%w: %w", api.ErrInvalid, err), Offset: -1})
	}
	return &Manager{
		cfg:     cfg,
		log:     log,
		factory: cfg.Factory,
		shared: Shared{Fabric: fabric.NewLocal(), Pins: pvdma.NewPool(cmp.Or(cfg.PinBudget, pvdma.DefaultLimit()), nil),
			Cores: cores},
		ready:   make(chan struct{}),
		devices: make(map[string]*entry),
	}, nil
}

// RunDir is the directory holding the sockets.
func (m *Manager) RunDir() string { return m.cfg.RunDir }

// APISocket is the path of the management API socket.
func (m *Manager) APISocket() string { return filepath.Join(m.cfg.RunDir, api.APISocketName) }

// SocketPath is the vhost-user socket path of the device called name.
func (m *Manager) SocketPath(name string) string {
	return filepath.Join(m.cfg.RunDir, name+".sock")
}

// Ready is closed once Run has created the configured devices and serves
// the management API.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// prepareRunDir creates the run directory once, remembering whether it
// existed so that shutdown can leave things as they were.
func (m *Manager) prepareRunDir() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirPrepared {
		return nil
	}
	dir := m.cfg.RunDir
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("run dir %s is not a directory", dir)
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		// 0755: front-ends running as other users must reach the
		// sockets; the socket modes are what restrict access.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating run dir: %w", err)
		}
		m.createdRunDir = true
	default:
		return fmt.Errorf("run dir: %w", err)
	}
	m.dirPrepared = true
	return nil
}

// CreateDevice creates a device and starts serving its socket. Errors
// wrap api.ErrInvalid (bad spec), api.ErrExists (duplicate name),
// ErrSocketInUse (another process owns the socket path) or
// api.ErrShuttingDown.
func (m *Manager) CreateDevice(ctx context.Context, spec api.DeviceSpec) (api.DeviceInfo, error) {
	if err := confcheck.ValidateSpec(spec); err != nil {
		return api.DeviceInfo{}, err
	}
	if err := m.prepareRunDir(); err != nil {
		return api.DeviceInfo{}, err
	}
	if err := m.startFabric(ctx); err != nil {
		return api.DeviceInfo{}, err
	}
	name := spec.Name
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return api.DeviceInfo{}, api.ErrShuttingDown
	}
	if _, ok := m.devices[name]; ok {
		m.mu.Unlock()
		return api.DeviceInfo{}, fmt.Errorf("%w: %q", api.ErrExists, name)
	}
	e := &entry{state: stateCreating}
	m.devices[name] = e
	m.ops.Add(1)
	m.mu.Unlock()
	defer m.ops.Done()

	// The deferred update also runs if the factory panics (net/http
	// recovers handler panics), so a name is never left reserved.
	var dev *device
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if dev == nil {
			delete(m.devices, name)
			return
		}
		e.dev, e.state = dev, stateReady
	}()
	dev, err := m.startDevice(ctx, spec)
	if err != nil {
		m.log.Warn("device creation failed", "device", name, "err", err)
		return api.DeviceInfo{}, err
	}
	dev.log.Info("device created", "socket", dev.sock.path)
	return dev.info(), nil
}

// startDevice builds the device model and backend, binds the socket and
// starts the accept loop. On error nothing is left behind.
func (m *Manager) startDevice(ctx context.Context, spec api.DeviceSpec) (*device, error) {
	log := m.log.With("device", spec.Name)
	path := m.SocketPath(spec.Name)
	if err := checkSocketPath(path); err != nil { // before building anything
		return nil, fmt.Errorf("device %q: %w", spec.Name, err)
	}
	inst, err := m.factory(ctx, spec, m.shared, m.log)
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", spec.Name, err)
	}
	if inst.Backend == nil {
		err = errors.New("device factory returned no backend")
	} else {
		ln, sock, lerr := listenSocket(path, os.FileMode(m.cfg.SocketMode))
		if lerr == nil {
			d := newDevice(ctx, spec, inst, ln, sock, log)
			d.start()
			return d, nil
		}
		err = lerr
	}
	if inst.Device != nil {
		if cerr := inst.Device.Close(); cerr != nil {
			log.Warn("closing device model after failed creation", "err", cerr)
		}
	}
	return nil, fmt.Errorf("device %q: %w", spec.Name, err)
}

// DestroyDevice stops a device and frees it (see the package doc for the
// order). The teardown is bounded by the configured shutdown timeout and
// is not cut short if ctx is cancelled half-way, so that a client hanging
// up cannot leave a half-destroyed device. Errors wrap api.ErrNotFound or
// ErrBusy when the device is absent or being created or destroyed.
func (m *Manager) DestroyDevice(ctx context.Context, name string) error {
	if err := api.ValidateName(name); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return api.ErrShuttingDown
	}
	e, ok := m.devices[name]
	switch {
	case !ok:
		m.mu.Unlock()
		return fmt.Errorf("%w: %q", api.ErrNotFound, name)
	case e.state != stateReady:
		m.mu.Unlock()
		return fmt.Errorf("%w: %q is being created or destroyed", ErrBusy, name)
	}
	e.state = stateDestroying
	m.ops.Add(1)
	m.mu.Unlock()
	defer m.ops.Done()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(m.cfg.ShutdownTimeout))
	defer cancel()
	defer func() {
		m.mu.Lock()
		delete(m.devices, name)
		m.mu.Unlock()
	}()
	return e.dev.destroy(ctx)
}

// Devices lists the ready devices, sorted by name.
func (m *Manager) Devices() []api.DeviceInfo {
	devs := m.readyDevices()
	infos := make([]api.DeviceInfo, len(devs))
	for i, d := range devs {
		infos[i] = d.info()
	}
	slices.SortFunc(infos, func(a, b api.DeviceInfo) int { return cmp.Compare(a.Name, b.Name) })
	return infos
}

// Device returns one ready device. The error wraps api.ErrNotFound.
func (m *Manager) Device(name string) (api.DeviceInfo, error) {
	d, err := m.readyDevice(name)
	if err != nil {
		return api.DeviceInfo{}, err
	}
	return d.info(), nil
}

// readyDevice returns the ready device called name. The error wraps
// api.ErrNotFound.
func (m *Manager) readyDevice(name string) (*device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.devices[name]
	if !ok || e.state != stateReady {
		return nil, fmt.Errorf("%w: %q", api.ErrNotFound, name)
	}
	return e.dev, nil
}

// readyDevices are the ready devices, in no order.
func (m *Manager) readyDevices() []*device {
	m.mu.Lock()
	defer m.mu.Unlock()
	devs := make([]*device, 0, len(m.devices))
	for _, e := range m.devices {
		if e.state == stateReady {
			devs = append(devs, e.dev)
		}
	}
	return devs
}

// DeviceStates reads the state of every ready device, sorted by name. A
// device being destroyed meanwhile shows without its model.
func (m *Manager) DeviceStates() []DeviceState {
	devs := m.readyDevices()
	out := make([]DeviceState, len(devs))
	for i, d := range devs {
		out[i] = d.state()
	}
	slices.SortFunc(out, func(a, b DeviceState) int { return cmp.Compare(a.Info.Name, b.Info.Name) })
	return out
}

// DeviceState reads one ready device's state. The error wraps
// api.ErrNotFound.
func (m *Manager) DeviceState(name string) (DeviceState, error) {
	d, err := m.readyDevice(name)
	if err != nil {
		return DeviceState{}, err
	}
	return d.state(), nil
}

// PinStats are the host's pinned-memory counters, all devices together.
func (m *Manager) PinStats() pvdma.Stats { return m.shared.Pins.Stats() }

// DataThreads says how the data path polls the engines (engine.Cores
// Mode) and what each of its threads did.
func (m *Manager) DataThreads() (mode string, threads []engine.ThreadStats) {
	return m.shared.Cores.Mode(), m.shared.Cores.Stats()
}

// PinLimit is the host's pin budget in bytes (0: none).
func (m *Manager) PinLimit() uint64 { return m.shared.Pins.Limit() }

// Shutdown refuses further creates and destroys, waits for those in
// flight, then destroys every device in parallel, bounded by ctx, and
// removes the run directory if this Manager created it and it is empty.
// It is what Run does after stopping the API; call it directly only for a
// Manager that is not Run. Calling it again is harmless.
func (m *Manager) Shutdown(ctx context.Context) error {
	start := time.Now()
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()

	opsDone := make(chan struct{})
	go func() { m.ops.Wait(); close(opsDone) }()
	select {
	case <-opsDone:
	case <-ctx.Done():
		return fmt.Errorf("shutdown: waiting for device operations in flight: %w", ctx.Err())
	}

	m.mu.Lock()
	var devs []*device
	for name, e := range m.devices {
		devs = append(devs, e.dev)
		delete(m.devices, name)
	}
	createdRunDir := m.createdRunDir
	m.createdRunDir = false
	stopFabric := m.remoteStop
	m.remoteStop = nil
	m.mu.Unlock()

	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for i, d := range devs {
		wg.Go(func() { errs[i] = d.destroy(ctx) })
	}
	wg.Wait()
	if stopFabric != nil {
		// After the devices: their QPs' connections are gone by now.
		if err := stopFabric(); err != nil {
			errs = append(errs, fmt.Errorf("fabric: %w", err))
		}
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if createdRunDir {
		// Fails harmlessly if something else was put there.
		if err := os.Remove(m.cfg.RunDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.log.Debug("run dir left in place", "run_dir", m.cfg.RunDir, "err", err)
		}
	}
	m.log.Info("devices shut down", "devices", len(devs), "failed", failed, "duration", time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}
