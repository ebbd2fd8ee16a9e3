package vmsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/virtio"
)

// Virtio feature bits the simulated driver knows (VIRTIO 1.x, "Reserved
// Feature Bits"), written out here rather than shared.
const (
	featIndirectDesc = 28
	featEventIdx     = 29
	featVersion1     = 32
	// DefaultDriverFeatures is what the driver acks when Config leaves
	// DeviceFeatures zero: VERSION_1, EVENT_IDX, INDIRECT_DESC and every
	// device-specific bit 0-23.
	DefaultDriverFeatures uint64 = 1<<featVersion1 | 1<<featEventIdx | 1<<featIndirectDesc | 1<<24 - 1
)

// Config describes the VM and its one vhost-user device.
type Config struct {
	// SocketPath is where the back-end listens.
	SocketPath string
	// MemSize is the guest RAM size in bytes (a page multiple).
	MemSize uint64
	// NumQueues is num_vqs; QueueSize is vq_size for every queue.
	NumQueues int
	QueueSize uint16
	// ConfigSize is config_size: the bytes GET_CONFIG asks for.
	ConfigSize uint32
	// DeviceFeatures is the set of virtio features the driver is willing
	// to ack (it acks those the device offers); zero means
	// DefaultDriverFeatures.
	DeviceFeatures uint64
	// ProtocolFeatures masks the protocol features the front-end accepts
	// (zero: all that package frontend supports). Like QEMU, the VM sends
	// the memory table as ADD_MEM_REG and REM_MEM_REG when
	// CONFIGURE_MEM_SLOTS is negotiated and as SET_MEM_TABLE otherwise.
	ProtocolFeatures uint64
	// Logger receives VMM and front-end events; nil discards them.
	Logger *slog.Logger
}

// queue is one virtqueue as the guest and the VMM hold it.
type queue struct {
	mu      sync.Mutex // serialises driver use (Request)
	addrs   virtio.RingAddrs
	dq      *virtio.DriverQueue
	kickFD  int      // guest writes: KVM ioeventfd
	call    *os.File // VMM waits: irqfd; owns callFD
	callFD  int
	lastAvl uint16  // next avail index to restore with SET_VRING_BASE
	known   bool    // lastAvl came from GET_VRING_BASE
	scratch uint64  // GPA of Request's buffers
	posted  *posted // PostWritable's buffers (guarded by mu)
}

// VM is a simulated virtual machine with one vhost-user device.
type VM struct {
	cfg Config
	log *slog.Logger
	// base is New's context without its cancellation, for the VMM's
	// own requests (the memory table update after a back-end request,
	// the stop at Close), which each have their own timeout.
	base    context.Context
	ram     *guestRAM
	shmem   *frontend.ShmemSpace
	barBase uint64 // guest physical address of the shared memory BAR
	queues  []*queue

	// loop is the main loop: held by every vhost-user exchange the VMM
	// starts, and by the service of each back-end request (mainloop.go).
	// The fields below it are written with loop and mu held.
	loop     mainLoop
	driverOK bool // the guest set DRIVER_OK and has not reset
	running  bool // the back-end has been started and not stopped

	mu       sync.Mutex // for readers without loop: fe, closed, acked, queue state
	fe       *frontend.Frontend
	acked    uint64 // driver-acked features (without bit 30)
	closed   bool
	configCh chan struct{}
}

// scratchSize is the per-queue guest buffer Request uses.
const scratchSize = 64 << 10

// New creates the VM's RAM, connects to the back-end and runs QEMU's
// connect sequence. The guest driver has not touched the device yet.
func New(ctx context.Context, cfg Config) (*VM, error) {
	if cfg.NumQueues <= 0 || cfg.NumQueues > 256 {
		return nil, fmt.Errorf("vmsim: %d queues", cfg.NumQueues)
	}
	if cfg.QueueSize == 0 || cfg.QueueSize&(cfg.QueueSize-1) != 0 || cfg.QueueSize > virtio.MaxQueueSize {
		return nil, fmt.Errorf("vmsim: queue size %d is not a power of two up to %d", cfg.QueueSize, virtio.MaxQueueSize)
	}
	if cfg.ConfigSize > frontend.MaxConfigSize {
		return nil, fmt.Errorf("vmsim: config size %d (max %d)", cfg.ConfigSize, frontend.MaxConfigSize)
	}
	if cfg.DeviceFeatures == 0 {
		cfg.DeviceFeatures = DefaultDriverFeatures
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ram, err := newGuestRAM(cfg.MemSize)
	if err != nil {
		return nil, fmt.Errorf("vmsim: %w", err)
	}
	vm := &VM{cfg: cfg, log: log, base: context.WithoutCancel(ctx), ram: ram, shmem: frontend.NewShmemSpace(), barBase: barBase(cfg.MemSize),
		loop: newMainLoop(), configCh: make(chan struct{}, 1)}
	for range cfg.NumQueues {
		q := &queue{kickFD: -1, callFD: -1}
		vm.queues = append(vm.queues, q)
		if q.kickFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			vm.Close()
			return nil, fmt.Errorf("vmsim: kick eventfd: %w", err)
		}
		if q.callFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			vm.Close()
			return nil, fmt.Errorf("vmsim: call eventfd: %w", err)
		}
		q.call = os.NewFile(uintptr(q.callFD), "irqfd") // non-blocking: pollable
	}
	vm.loop.Lock()
	defer vm.loop.Unlock()
	if err := vm.connect(ctx); err != nil {
		vm.closeLocked()
		return nil, err
	}
	return vm, nil
}

// connect dials the back-end and runs frontend.Init. Called with loop
// held.
func (vm *VM) connect(ctx context.Context) error {
	fe, err := frontend.Dial(ctx, vm.cfg.SocketPath, frontend.Options{
		Logger:           vm.log,
		NumQueues:        vm.cfg.NumQueues,
		ProtocolFeatures: vm.cfg.ProtocolFeatures,
		RequireConfig:    vm.cfg.ConfigSize > 0,
		Shmem:            vm.shmem,
		MainLoop:         vm.serveBackend,
		OnConfigChange: func() {
			select {
			case vm.configCh <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return fmt.Errorf("vmsim: %w", err)
	}
	if err := fe.Init(ctx); err != nil {
		fe.Close()
		return fmt.Errorf("vmsim: %w", err)
	}
	vm.setFrontend(fe)
	return nil
}

func (vm *VM) setFrontend(fe *frontend.Frontend) {
	vm.mu.Lock()
	vm.fe = fe
	vm.mu.Unlock()
}

// closeTimeout bounds the device stop Close makes.
const closeTimeout = 5 * time.Second

// Close stops a running device, as QEMU does before it exits or lets an
// unplugged device go (SET_VRING_ENABLE 0 and GET_VRING_BASE per queue,
// within closeTimeout), disconnects, and frees guest RAM, eventfds and
// shared memory. Views and queues obtained from the VM must no longer be
// used.
func (vm *VM) Close() error {
	vm.loop.Lock()
	defer vm.loop.Unlock()
	return vm.closeLocked()
}

func (vm *VM) closeLocked() error {
	vm.mu.Lock()
	closed := vm.closed
	vm.closed = true
	vm.mu.Unlock()
	if closed {
		return nil
	}
	var err error
	if vm.fe != nil {
		if vm.running {
			ctx, cancel := context.WithTimeout(vm.base, closeTimeout)
			if serr := vm.stopLocked(ctx); serr != nil {
				vm.log.Debug("vmsim: stop before close failed", "err", serr)
			}
			cancel()
		}
		err = vm.fe.Close()
	}
	vm.shmem.Close()
	for _, q := range vm.queues {
		if q.kickFD >= 0 {
			unix.Close(q.kickFD)
		}
		if q.call != nil {
			q.call.Close()
		} else if q.callFD >= 0 {
			unix.Close(q.callFD)
		}
	}
	vm.ram.close()
	return err
}

// Alloc reserves size bytes of guest low RAM aligned to align and returns
// their guest physical address. The memory is not touched.
func (vm *VM) Alloc(size, align uint64) (uint64, error) { return vm.ram.alloc(size, align) }

// Memory is the VMM's view of guest RAM: guest physical address to the
// VMM's mapping.
func (vm *VM) Memory() *guestmem.Table { return vm.ram.table }

// Regions are the memory regions the VM sends to the back-end.
func (vm *VM) Regions() []frontend.MemRegion {
	return append([]frontend.MemRegion(nil), vm.ram.regions...)
}

// Frontend is the current connection's front-end, for hostile tests.
func (vm *VM) Frontend() *frontend.Frontend {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.fe
}

// Queue is the guest driver's queue i (nil before Start).
func (vm *VM) Queue(i int) *virtio.DriverQueue {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if i < 0 || i >= len(vm.queues) {
		return nil
	}
	return vm.queues[i].dq
}

// AckedFeatures are the virtio features the driver acked.
func (vm *VM) AckedFeatures() uint64 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.acked
}

// ReadConfig reads the device's config space as QEMU does on every guest
// config access (vub_get_config, on the main loop): GET_CONFIG of
// ConfigSize bytes at offset 0.
func (vm *VM) ReadConfig(ctx context.Context) ([]byte, error) {
	vm.loop.Lock()
	defer vm.loop.Unlock()
	if vm.fe == nil {
		return nil, errors.New("vmsim: not connected")
	}
	return vm.fe.GetConfig(ctx, 0, vm.cfg.ConfigSize, 0)
}

// ConfigChanges delivers one value per burst of config-change
// notifications from the back-end (across reconnects).
func (vm *VM) ConfigChanges() <-chan struct{} { return vm.configCh }

// Shmem returns all of shared memory region shmid (the device's shared
// memory BAR). Only bytes the back-end has mapped may be touched; see
// ShmemMapped.
func (vm *VM) Shmem(shmid uint8) guestmem.View {
	v, _ := vm.shmem.View(shmid)
	return v
}

// ShmemMapped returns n bytes at off of region shmid if the back-end has
// mapped every one of them.
func (vm *VM) ShmemMapped(shmid uint8, off, n uint64) (guestmem.View, error) {
	return vm.shmem.Mapped(shmid, off, n)
}

// ShmemSpace is the VM's shared memory address space (regions and their
// mappings).
func (vm *VM) ShmemSpace() *frontend.ShmemSpace { return vm.shmem }
