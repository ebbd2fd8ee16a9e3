package agent

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// A stream of WRITEs that runs in the background until StreamStop, so
// that the host can pause and resume a VM (or restart something) while
// it runs and then check that every WRITE completed and every byte
// arrived.

// stream is a running or finished stream.
type stream struct {
	a     StreamArgs
	area  []byte // Slots*Size local bytes at a.LocalOff
	first chan struct{}

	mu  sync.Mutex
	st  StreamStatus
	sum string // SHA-256 of area once the stream ended
}

// maxStreamSlots bounds a stream's slots.
const maxStreamSlots = 1 << 16

// streamStart answers StreamStart: it starts the stream and returns once
// the first WRITE completed (or the stream failed).
func (s *Service) streamStart(ctx context.Context, a StreamArgs) error {
	maxDur, err := s.wait("max duration", a.MaxDurationMs, false)
	switch {
	case err != nil:
		return err
	case a.Size < 8:
		return fmt.Errorf("WRITEs of %d bytes (each starts with its 8-byte number)", a.Size)
	case a.Slots < 1 || a.Slots > maxStreamSlots:
		return fmt.Errorf("%d slots (1..%d)", a.Slots, maxStreamSlots)
	case a.Window < 1 || a.Window > a.Slots:
		// A slot's bytes are rewritten only once its last WRITE has
		// completed, which a window of at most Slots guarantees.
		return fmt.Errorf("window of %d (1..slots)", a.Window)
	}
	if maxDur == 0 {
		maxDur = s.o.MaxWait
	}
	s.mu.RLock() // held by the stream until it ends
	if s.st == nil {
		s.mu.RUnlock()
		return errors.New("not set up (call Setup)")
	}
	o := s.st
	area, err := o.span(a.LocalOff, uint64(a.Slots)*uint64(a.Size))
	if err != nil {
		s.mu.RUnlock()
		return err
	}
	st := &stream{a: a, area: area, first: make(chan struct{})}
	st.st.Running = true
	// Not the request's context: the stream outlives StreamStart.
	l, lctx, err := s.startLoop(context.WithoutCancel(ctx), "stream", maxDur, st)
	if err != nil {
		s.mu.RUnlock()
		return err
	}
	Pattern(area, a.Seed)
	go func() {
		defer s.mu.RUnlock()
		defer close(l.done)
		st.run(lctx, o, s.o.CommandTimeout)
	}()
	select {
	case <-st.first:
		return nil
	case <-l.done:
	case <-ctx.Done():
	}
	select {
	case <-st.first: // and ended already: StreamStop has the result
		return nil
	default:
	}
	// It failed (or the host gave up) before its first completion.
	l.cancel()
	<-l.done
	s.release(l)
	st.mu.Lock()
	defer st.mu.Unlock()
	return fmt.Errorf("stream did not start: %s", cmp.Or(st.st.Err, "no completion"))
}

// run posts and completes WRITEs until ctx ends (StreamStop, Reset, the
// maximum duration), then waits up to drain for what is in flight.
func (st *stream) run(ctx context.Context, o *objects, drain time.Duration) {
	a := st.a
	wcs := make([]guestdriver.WC, 64)
	var posted, done uint64
	var failed error
	t0 := time.Now()
	last := t0
	var maxGap time.Duration
	var stopAt time.Time
	for {
		stopping := failed != nil || ctx.Err() != nil
		if stopping && stopAt.IsZero() {
			stopAt = time.Now()
		}
		for !stopping && posted-done < uint64(a.Window) {
			slot := posted % uint64(a.Slots)
			off := slot * uint64(a.Size)
			binary.LittleEndian.PutUint64(st.area[off:], posted)
			err := o.qp.PostSend(guestdriver.SendWR{WRID: posted, Opcode: abi.WRRDMAWrite, Signaled: true,
				SGL:        []abi.SGE{o.mr.SGE(a.LocalOff+off, a.Size)},
				RemoteAddr: a.RemoteAddr + off, RKey: a.RKey})
			if errors.Is(err, guestdriver.ErrQueueFull) {
				break
			}
			if err != nil {
				failed = fmt.Errorf("posting WRITE %d: %w", posted, err)
				break
			}
			posted++
		}
		if stopping && done == posted {
			break
		}
		k := uint64(o.scq.Poll(wcs))
		now := time.Now()
		for _, wc := range wcs[:k] {
			if err := wc.Err(); err != nil && failed == nil {
				failed = fmt.Errorf("WRITE %d: %w", wc.WRID, err)
			}
		}
		if k > 0 {
			maxGap = max(maxGap, now.Sub(last))
			last = now
			done += k
			st.progress(posted, done, now.Sub(t0), maxGap, failed)
			continue
		}
		if stopping && now.Sub(stopAt) > drain {
			failed = fmt.Errorf("%d of %d WRITEs never completed", posted-done, posted)
			break
		}
		runtime.Gosched()
	}
	st.progress(posted, done, time.Since(t0), maxGap, failed)
	sum := SHA256(st.area) // while the objects are still held
	st.mu.Lock()
	st.st.Running, st.sum = false, sum
	st.mu.Unlock()
}

// progress publishes the counters; the first completion lets
// StreamStart return.
func (st *stream) progress(posted, done uint64, el, maxGap time.Duration, failed error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if done > 0 && st.st.Completed == 0 {
		close(st.first)
	}
	st.st.Posted, st.st.Completed = posted, done
	st.st.Bytes = done * uint64(st.a.Size)
	st.st.Micros, st.st.MaxGapUs = micros(el), micros(maxGap)
	if failed != nil && st.st.Err == "" {
		st.st.Err = failed.Error()
	}
}

// current is the stream the loop slot holds, if any.
func (s *Service) current() (*loop, error) {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	if s.loop == nil || s.loop.stream == nil {
		return nil, errors.New("no stream")
	}
	return s.loop, nil
}

// streamStatus answers StreamStatus.
func (s *Service) streamStatus() (StreamStatus, error) {
	l, err := s.current()
	if err != nil {
		return StreamStatus{}, err
	}
	l.stream.mu.Lock()
	defer l.stream.mu.Unlock()
	return l.stream.st, nil
}

// streamStop answers StreamStop: it stops the stream, waits until what
// is in flight completed and returns the result.
func (s *Service) streamStop(ctx context.Context) (StreamResult, error) {
	l, err := s.current()
	if err != nil {
		return StreamResult{}, err
	}
	l.cancel()
	select {
	case <-l.done:
	case <-ctx.Done():
		return StreamResult{}, ctx.Err()
	}
	s.release(l)
	st := l.stream
	st.mu.Lock()
	defer st.mu.Unlock()
	return StreamResult{StreamStatus: st.st, LocalSHA256: st.sum}, nil
}
