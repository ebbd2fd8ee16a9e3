package agent

import (
	"context"
	"fmt"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
)

// Buffer access by offset, and registering memory the host names.

// span returns the n buffer bytes at off, refusing a range the buffer
// does not hold (off and n come from the host).
func (o *objects) span(off, n uint64) ([]byte, error) {
	v, err := o.buf.View.Sub(off, n)
	if err != nil {
		return nil, fmt.Errorf("buffer range: %w", err)
	}
	return v.Bytes(), nil
}

func (s *Service) fill(a FillArgs) error {
	return s.use(func(o *objects) error {
		b, err := o.span(a.Off, a.Len)
		if err != nil {
			return err
		}
		Pattern(b, a.Seed)
		return nil
	})
}

func (s *Service) store(a StoreArgs) error {
	if len(a.Data) > MaxIO {
		return fmt.Errorf("store of %d bytes (at most %d)", len(a.Data), MaxIO)
	}
	return s.use(func(o *objects) error {
		b, err := o.span(a.Off, uint64(len(a.Data)))
		if err != nil {
			return err
		}
		copy(b, a.Data)
		return nil
	})
}

func (s *Service) read(a RangeArgs) (ReadReply, error) {
	var r ReadReply
	if a.Len > MaxIO {
		return r, fmt.Errorf("read of %d bytes (at most %d)", a.Len, MaxIO)
	}
	err := s.use(func(o *objects) error {
		b, err := o.span(a.Off, a.Len)
		r.Data = append([]byte{}, b...)
		return err
	})
	return r, err
}

func (s *Service) digest(a RangeArgs) (DigestReply, error) {
	var r DigestReply
	err := s.use(func(o *objects) error {
		b, err := o.span(a.Off, a.Len)
		if err != nil {
			return err
		}
		r.SHA256 = SHA256(b)
		return nil
	})
	return r, err
}

// maxRegMRAt bounds RegMRAt's length (the page list costs 8 bytes of
// guest memory per 4 KiB page).
const maxRegMRAt = 1 << 30

// regMRAt answers RegMRAt: REG_MR over memory the host names, such as
// the doorbell region, which the device must refuse. What the device
// accepts is deregistered at once.
func (s *Service) regMRAt(ctx context.Context, a RegMRAtArgs) (RegMRAtReply, error) {
	var r RegMRAtReply
	switch {
	case a.Len == 0 || a.Len > maxRegMRAt:
		return r, fmt.Errorf("MR of %d bytes (1..%d)", a.Len, maxRegMRAt)
	case a.GPA+a.Len < a.GPA:
		return r, fmt.Errorf("MR at %#x+%#x wraps", a.GPA, a.Len)
	}
	if err := a.Access.Validate(); err != nil {
		return r, err
	}
	err := s.use(func(o *objects) error {
		ctx, cancel := s.cmdCtx(ctx)
		defer cancel()
		var mr *guestdriver.MR
		var err error
		if a.Pages {
			first := a.GPA &^ 4095
			pages := make([]uint64, (a.GPA+a.Len-first+4095)/4096)
			for i := range pages {
				pages[i] = first + uint64(i)*4096
			}
			mr, err = o.pd.RegMRPages(ctx, a.GPA, a.Len, 12, pages, a.Access)
		} else {
			// A contiguous REG_MR sends only the buffer's GPA and
			// length; the driver wants a view too, so it borrows one
			// of the right length from the agent's buffer, which
			// nothing reads through this MR.
			v, verr := o.buf.View.Sub(0, a.Len)
			if verr != nil {
				return fmt.Errorf("contiguous MR of %d bytes: at most the buffer's %d", a.Len, o.buf.Len())
			}
			mr, err = o.pd.RegMR(ctx, guestdriver.Buffer{GPA: a.GPA, View: v}, a.Access)
		}
		if err != nil {
			return err
		}
		r.LKey = mr.LKey()
		s.log.Warn("device accepted an MR the host asked for", "gpa", fmt.Sprintf("%#x", a.GPA), "len", a.Len)
		return mr.Dereg(ctx)
	})
	return r, err
}
