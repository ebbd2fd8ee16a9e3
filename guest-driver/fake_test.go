package guestdriver

import (
	"context"
	"errors"
	"sync"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// fakeTransport is a device played by the test: canned or handler-made
// answers to commands, guest "RAM" and a doorbell region in anonymous
// memory, and an event queue the test fills by hand. It lets the driver's
// logic (encoding, ring arithmetic, event routing) be tested against
// plain bytes, and a hostile device be played.
type fakeTransport struct {
	config  []byte
	resp    []byte
	err     error
	handler func(op abi.Opcode, payload []byte) (abi.Status, []byte)

	mu       sync.Mutex
	lastReq  []byte
	respLen  uint32
	resets   int
	gidAsked bool // Open's QUERY_GID of index 0 was answered
	ops      []abi.Opcode

	memOnce sync.Once
	ram     guestmem.View
	next    uint64 // bump allocator offset into ram
	dbView  guestmem.View
	shmem   bool // Doorbells returns dbView
	wakeups int

	posted []Buffer
	used   []fakeUsed
	signal chan struct{}
}

type fakeUsed struct {
	buf Buffer
	n   uint32
}

const (
	fakeRAMBase = 1 << 20
	fakeRAMSize = 8 << 20
)

func (f *fakeTransport) init() {
	f.memOnce.Do(func() {
		m, err := guestmem.MapAnonymous(fakeRAMSize)
		if err != nil {
			panic(err)
		}
		f.ram = m.View()
		d, err := guestmem.MapAnonymous(1 << 20)
		if err != nil {
			panic(err)
		}
		f.dbView = d.View()
		f.signal = make(chan struct{}, 1)
	})
}

func (f *fakeTransport) Command(_ context.Context, req []byte, respLen uint32) ([]byte, error) {
	r, derr := abi.DecodeRequest(req)
	f.mu.Lock()
	if derr == nil {
		f.ops = append(f.ops, r.Header.Opcode)
	}
	if derr == nil && r.Header.Opcode == abi.OpResetState && f.err == nil {
		f.resets++
		f.gidAsked = false // the Open probing now asks for its GID next
		f.mu.Unlock()
		return abi.AppendResponse(nil, abi.StatusOK, nil), nil // Open's probe
	}
	if derr == nil && r.Header.Opcode == abi.OpQueryGID && f.err == nil && !f.gidAsked {
		// Open asks for GID index 0 once: a link-local GID of the GUID.
		f.gidAsked = true
		var cfg abi.Config
		cfg.UnmarshalBinary(f.config)
		e := abi.GIDEntry{GID: NodeGID(cfg.NodeGUID), Type: abi.GIDTypeRoCE2, Flags: abi.GIDFlagDevice}
		b := abi.EncodePayload(nil, &e)
		f.mu.Unlock()
		return abi.AppendResponse(nil, abi.StatusOK, b), nil
	}
	f.lastReq, f.respLen = append([]byte(nil), req...), respLen
	h := f.handler
	f.mu.Unlock()
	if h != nil && derr == nil {
		st, body := h(r.Header.Opcode, r.Payload)
		return abi.AppendResponse(nil, st, body), nil
	}
	return f.resp, f.err
}

func (f *fakeTransport) ReadConfig(context.Context) ([]byte, error) { return f.config, f.err }

func (f *fakeTransport) Doorbells() (guestmem.View, error) {
	f.init()
	if !f.shmem {
		return guestmem.View{}, ErrNoDoorbells
	}
	return f.dbView, nil
}

func (f *fakeTransport) AllocDMA(size, align uint64) (Buffer, error) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	off := (f.next + align - 1) &^ (align - 1)
	if off+size > fakeRAMSize {
		return Buffer{}, errors.New("fake RAM exhausted")
	}
	f.next = off + size
	v, _ := f.ram.Sub(off, size)
	return Buffer{GPA: fakeRAMBase + off, View: v}, nil
}

// gpaView is the test's view of fake guest memory.
func (f *fakeTransport) gpaView(gpa, n uint64) guestmem.View {
	v, err := f.ram.Sub(gpa-fakeRAMBase, n)
	if err != nil {
		panic(err)
	}
	return v
}

func (f *fakeTransport) NotifyWakeup() error {
	f.mu.Lock()
	f.wakeups++
	f.mu.Unlock()
	return nil
}

func (f *fakeTransport) PostEventBuffers(bufs ...Buffer) error {
	f.init()
	if f.err != nil {
		return f.err
	}
	f.mu.Lock()
	f.posted = append(f.posted, bufs...)
	f.mu.Unlock()
	return nil
}

func (f *fakeTransport) PostedEventBuffers() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.posted) + len(f.used), nil
}

func (f *fakeTransport) TakeEvent() (Buffer, uint32, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.used) == 0 {
		return Buffer{}, 0, false, nil
	}
	u := f.used[0]
	f.used = f.used[1:]
	return u.buf, u.n, true, nil
}

func (f *fakeTransport) WaitEvents(ctx context.Context) error {
	f.init()
	f.mu.Lock()
	pending := len(f.used) > 0
	f.mu.Unlock()
	if pending {
		return nil
	}
	select {
	case <-f.signal:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deliver is the device writing raw into the oldest posted event buffer
// and claiming n bytes written. It reports whether a buffer was posted.
func (f *fakeTransport) deliver(raw []byte, n uint32) bool {
	f.mu.Lock()
	if len(f.posted) == 0 {
		f.mu.Unlock()
		return false
	}
	b := f.posted[0]
	f.posted = f.posted[1:]
	copy(b.Bytes(), raw)
	f.used = append(f.used, fakeUsed{b, n})
	f.mu.Unlock()
	select {
	case f.signal <- struct{}{}:
	default:
	}
	return true
}

func (f *fakeTransport) deliverEvent(ev abi.Event) bool {
	var b [abi.EventSize]byte
	ev.Put(b[:])
	return f.deliver(b[:], abi.EventSize)
}

func (f *fakeTransport) numPosted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.posted)
}

func (f *fakeTransport) opsSeen() []abi.Opcode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]abi.Opcode(nil), f.ops...)
}
