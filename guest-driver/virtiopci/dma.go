//go:build linux

package virtiopci

import (
	"errors"
	"fmt"
	"sync"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guestmem"
)

// hugePageSize is the size of the pages DMA memory comes in: a huge page
// is physically contiguous, so a ring or buffer inside one needs no
// IOMMU and no page list.
const hugePageSize = 2 << 20

// backing makes DMA memory: pages huge pages, mapped, resident and
// locked, with the physical address of each.
type backing interface {
	chunk(pages int) (*guestmem.Mapping, []uint64, error)
}

// run is a physically contiguous stretch of DMA memory; allocation bumps
// used along it and never gives memory back (the verbs library recycles
// what it frees itself).
type run struct {
	gpa  uint64
	view guestmem.View
	used uint64
}

// fit returns the offset in r of size bytes whose guest-physical address
// is aligned to align, if they fit.
func (r *run) fit(size, align uint64) (uint64, bool) {
	start := (r.gpa+r.used+align-1)&^(align-1) - r.gpa
	if start < r.used || start+size < start || start+size > r.view.Len() {
		return 0, false
	}
	return start, true
}

// dmaPool is the transport's DMA memory: chunks of huge pages from a
// backing, split into physically contiguous runs.
type dmaPool struct {
	mu       sync.Mutex
	b        backing
	minPages int // pages per chunk at least
	chunks   []*guestmem.Mapping
	runs     []*run
	regions  []guestmem.Region
}

func newDMAPool(b backing, minPages int) *dmaPool {
	return &dmaPool{b: b, minPages: max(minPages, 1)}
}

// alloc returns size bytes aligned to align (a power of two) in
// guest-physical space, zero, from an existing run or a new chunk.
func (p *dmaPool) alloc(size, align uint64) (guestdriver.Buffer, error) {
	if align == 0 {
		align = 1
	}
	if size == 0 || align&(align-1) != 0 || size > 1<<40 || align > 1<<40 {
		return guestdriver.Buffer{}, fmt.Errorf("virtiopci: dma allocation of %d bytes aligned to %d", size, align)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.take(p.runs, size, align); ok {
		return b, nil
	}
	pages := int(max((size+align+hugePageSize-1)/hugePageSize, uint64(p.minPages)))
	fresh, err := p.grow(pages)
	if err != nil {
		return guestdriver.Buffer{}, err
	}
	if b, ok := p.take(fresh, size, align); ok {
		return b, nil
	}
	var largest uint64
	for _, r := range fresh {
		largest = max(largest, r.view.Len())
	}
	return guestdriver.Buffer{}, fmt.Errorf("virtiopci: no physically contiguous run of %d bytes aligned to %d in %d fresh huge pages (largest run %d bytes): %w",
		size, align, pages, largest, errNoContiguous)
}

// errNoContiguous: the kernel did not hand out physically consecutive
// huge pages for a request larger than one.
var errNoContiguous = errors.New("virtiopci: DMA memory is not physically contiguous enough")

func (p *dmaPool) take(runs []*run, size, align uint64) (guestdriver.Buffer, bool) {
	for _, r := range runs {
		if off, ok := r.fit(size, align); ok {
			r.used = off + size
			v, _ := r.view.Sub(off, size) // fit checked the range
			return guestdriver.Buffer{GPA: r.gpa + off, View: v}, true
		}
	}
	return guestdriver.Buffer{}, false
}

// grow adds a chunk of pages huge pages and returns its runs.
func (p *dmaPool) grow(pages int) ([]*run, error) {
	m, pas, err := p.b.chunk(pages)
	if err != nil {
		return nil, err
	}
	if len(pas) != pages {
		m.Unmap()
		return nil, fmt.Errorf("virtiopci: %d physical addresses for %d pages", len(pas), pages)
	}
	var fresh []*run
	var regions []guestmem.Region
	for _, s := range contiguous(pas, hugePageSize) {
		off, n := uint64(s[0])*hugePageSize, uint64(s[1]-s[0])*hugePageSize
		w := m
		if n != m.Size() {
			if w, err = m.Window(off, n); err != nil {
				m.Unmap()
				return nil, err
			}
		}
		fresh = append(fresh, &run{gpa: pas[s[0]], view: w.View()})
		regions = append(regions, guestmem.Region{GuestPhys: pas[s[0]], Size: n, UserAddr: m.Addr() + off, Mapping: w})
	}
	if _, err := guestmem.NewTable(append(p.regionsCopy(), regions...)); err != nil {
		m.Unmap()
		return nil, fmt.Errorf("virtiopci: new DMA memory: %w", err)
	}
	p.chunks = append(p.chunks, m)
	p.runs = append(p.runs, fresh...)
	p.regions = append(p.regions, regions...)
	return fresh, nil
}

func (p *dmaPool) regionsCopy() []guestmem.Region {
	return append([]guestmem.Region(nil), p.regions...)
}

// contiguous splits pages at physical addresses pas into runs of
// physically consecutive pages, as [first, end) index pairs.
func contiguous(pas []uint64, pageSize uint64) [][2]int {
	var out [][2]int
	for i := 0; i < len(pas); {
		j := i + 1
		for j < len(pas) && pas[j] == pas[j-1]+pageSize {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

// table is all DMA memory as a guest memory table (GPA to view), what
// the split-ring driver translates its rings through.
func (p *dmaPool) table() (*guestmem.Table, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return guestmem.NewTable(p.regions)
}

// close unmaps every chunk. No buffer may be used afterwards (nor by the
// device: reset it first).
func (p *dmaPool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, m := range p.chunks {
		errs = append(errs, m.Unmap())
	}
	p.chunks, p.runs, p.regions = nil, nil, nil
	return errors.Join(errs...)
}
