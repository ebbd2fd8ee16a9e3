package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/twolevel"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The translate suite: the eMTT's one-step translation against the
// two-level path it replaces (MTT, then a 64-entry ATC shared by every
// device of the NIC, then the IOMMU page walk on a miss;
// internal/sim/twolevel), as the number of devices grows.
//
// Every device is its own VM: its own guest memory table, pin cache,
// eMTT, MTT and IOMMU domain. Guest RAM is trMRs regions 256 MiB apart in
// guest physical space, each a little over an MR; all guest memory tables
// put the same untouched anonymous mappings there, so a thousand devices
// cost tables but no guest RAM. (The IOMMU maps all guest RAM, as VFIO
// does; RAM no MR covers would only add page tables no walk reads, and
// the time to build them.) Each device registers one MR of trMRSize
// bytes per region in both tables.
//
// Two access patterns run on the same devices, each drawn once per device
// count with a fixed seed. In both, the device of each DMA is uniform (a
// NIC serving every device sees their traffic interleaved) and a DMA is
// 4..64 KiB at a cache-line-aligned offset.
//   - hot set, the headline: RDMA applications (NCCL, storage targets)
//     post their DMAs into a few registered buffers they reuse. Each
//     device has trHotBufs page-aligned buffers of trHotSize bytes, one in
//     each MR at a place fixed per device; trHotPct% of DMAs fall inside
//     one of them, the rest anywhere in an MR. One device's hot set is
//     trHotBufs*trHotSize = 256 KiB, the reach of the 64-entry ATC of
//     4 KiB entries: alone, a device mostly hits; as devices are added,
//     their hot sets evict each other, which is the thrashing the eMTT
//     avoids.
//   - uniform: every DMA anywhere in an MR. No reuse, the ATC's worst case.
//
// Both paths are first run over the whole sequence untimed (the eMTT's
// chunks get pinned), then timed alternately, each loop right after an
// untimed run of itself (so that it finds the caches warm, not as the GC
// and the other path's loop left them), the best
// of 5 rounds each (3 with --quick: the rounds are cheap, building the
// devices is what takes the time, and a single round is at the mercy of
// the machine's noise); only the translation loops are timed, and they do
// not allocate.
//
// The headline compares translation with translation: the eMTT's lookup
// (emtt.Table.Translate without a pvdma.Hold) against the model's, and
// neither pays for keeping memory pinned. Behind the model is VFIO, which
// pinned all guest memory at start and pays nothing per DMA; behind the
// eMTT is PVDMA, whose engine takes a pin reference on every chunk a DMA
// touches and drops it after. That cost is PVDMA's, not the table's: it
// is timed too (a Hold per DMA, released after it, as the engine does),
// reported beside the headline as "+ pins", with its own ratio and growth.

const (
	trMRs        = 4
	trMRSize     = 64 << 20
	trRegionSize = trMRSize + 2<<20
	trMaxDevices = 2048 // about 1 MiB of model tables each
	trSeed       = 0x5e11a
	trPD         = 1

	trHotBufs = trMRs // one hot buffer in each MR
	trHotSize = 64 << 10
	trHotPct  = 90
)

const translateMethod = `ns per DMA address translation with 1 to 1024 devices, each its own VM
with 4 MRs of 64 MiB, through the eMTT (emtt.Table.Translate) and through a
model of the two-level path it replaces (internal/sim/twolevel: a per-device MTT of
4 KiB pages, then per page a 64-entry ATC shared by all devices, with a
4-level IOMMU page walk on a miss), on the same precomputed sequence of
DMAs of 4-64 KiB, devices interleaved; best of the rounds. Neither
headline figure pays for pinning (VFIO pinned everything at start); the
eMTT is also timed with the PVDMA pin references the engine takes and
drops per DMA ("+ pins"). The headline pattern reuses buffers: each device
has 4 hot 64 KiB buffers that take 90% of its DMAs; the uniform pattern
(no reuse) is the ATC's worst case. The model adds no delay for a miss (a
NIC pays a PCIe round trip to the IOMMU), so the ratios understate the
gap.`

var translateGoals = []goal{
	atLeast("ratio", 5, "2-level / eMTT translation at the largest device count; the issue sets it at 1024"),
	atMost("emtt_flatness", 1.5, "eMTT flat: translation ns at the largest count / ns at 1 device"),
}

// trSizes are the DMA lengths, drawn uniformly.
var trSizes = []uint64{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}

// trPatterns are the access patterns, the headline first. suffix ends
// their JSON keys; hotPct is the share of DMAs inside the hot buffers.
var trPatterns = []struct {
	name, suffix string
	hotPct       int
}{
	{"hot set", "", trHotPct},
	{"uniform", "_uniform", 0},
}

type trDevice struct {
	cache *pvdma.Cache
	tab   *emtt.Table
	model *twolevel.Device
	ekeys [trMRs]emtt.Key
	mkeys [trMRs]emtt.Key
}

type trAccess struct {
	// 16 bytes: the sequence streams through the CPU's caches beside the
	// tables it measures, so the smaller it is the less it evicts them.
	dev  uint16 // < trMaxDevices
	mr   uint16
	n    uint32
	iova uint64
}

// trIOVA and trGPA place MR k: at a user-space IOVA, in guest memory
// region k (at guest physical k<<28), neither 2 MiB aligned.
func trIOVA(k int) uint64 { return 0x7f12_0000_0000 + uint64(k)<<28 + 0x7000 }
func trGPA(k int) uint64  { return uint64(k)<<28 + 0x5000 }

func runTranslate(ctx context.Context, o options, r *report) error {
	counts, accesses, rounds := "1,16,256,1024", 1<<20, 5
	if o.quick {
		counts, accesses, rounds = "1,256", 1<<17, 3
	}
	if o.tiny {
		counts, accesses, rounds = "1,4", 2000, 1
	}
	if o.devices != "" {
		counts = o.devices
	}
	devCounts, err := parseDeviceCounts(counts)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	guest, unmap, err := translateGuest()
	if err != nil {
		return err
	}
	defer unmap()

	// res[p][i]: pattern p at devCounts[i]. Both patterns run on the same
	// devices, built once per count.
	res := make([][]trResult, len(trPatterns))
	for _, n := range devCounts {
		if err := ctx.Err(); err != nil {
			return err
		}
		got, err := measureTranslate(ctx, guest, n, accesses, rounds)
		if err != nil {
			return fmt.Errorf("%d devices: %w", n, err)
		}
		for p := range trPatterns {
			res[p] = append(res[p], got[p])
		}
	}

	titles := []string{
		fmt.Sprintf("DMA address translation, hot set: %d DMAs of 4..64 KiB per count, %d%% inside %d x %s buffers per device, the rest over its %d x %s MRs (best of %d)",
			accesses, trHotPct, trHotBufs, sizeName(trHotSize), trMRs, sizeName(trMRSize), rounds),
		fmt.Sprintf("DMA address translation, uniform: no reuse, %d DMAs of 4..64 KiB per count over %d x %s MRs per device (best of %d)",
			accesses, trMRs, sizeName(trMRSize), rounds),
	}
	for p, pat := range trPatterns {
		t := r.table(titles[p], "devices", "eMTT ns", "+ pins ns", "2-level ns", "ratio", "ATC hit %", "pages/DMA", "model MiB")
		key := func(name string, n int) string { return fmt.Sprintf("%s%s_%d", name, pat.suffix, n) }
		for i, n := range devCounts {
			x := res[p][i]
			t.row(fmt.Sprint(n), fmt.Sprintf("%.1f", x.emttNS), fmt.Sprintf("%.1f", x.pinsNS), fmt.Sprintf("%.1f", x.atcNS),
				fmt.Sprintf("%.2f", x.atcNS/x.emttNS), fmt.Sprintf("%.1f", x.hitPct),
				fmt.Sprintf("%.2f", x.pagesPerDMA), fmt.Sprintf("%.0f", float64(x.modelBytes)/(1<<20)))
			r.set(key("emtt_ns", n), x.emttNS)
			r.set(key("emtt_pins_ns", n), x.pinsNS)
			r.set(key("atc_ns", n), x.atcNS)
			r.set(key("ratio", n), x.atcNS/x.emttNS)
			r.set(key("atc_hit_pct", n), x.hitPct)
		}
		if p == 0 {
			fig := r.lines("ns", "DMA translation, hot set: ns per DMA", "devices", "ns per DMA")
			fig.logX = true
			for i, n := range devCounts {
				x := res[p][i]
				fig.add("eMTT", float64(n), x.emttNS)
				fig.add("eMTT + PVDMA pin references", float64(n), x.pinsNS)
				fig.add("MTT + shared ATC (model)", float64(n), x.atcNS)
			}
		}
		first, last := res[p][0], res[p][len(devCounts)-1]
		r.set("emtt_ns"+pat.suffix, last.emttNS)
		r.set("atc_ns"+pat.suffix, last.atcNS)
		r.set("ratio"+pat.suffix, last.atcNS/last.emttNS)
		r.set("emtt_pins_ns"+pat.suffix, last.pinsNS)
		r.set("ratio_pins"+pat.suffix, last.atcNS/last.pinsNS)
		r.set("emtt_flatness"+pat.suffix, last.emttNS/first.emttNS)
		r.set("pins_flatness"+pat.suffix, last.pinsNS/first.pinsNS)
		r.set("atc_growth"+pat.suffix, last.atcNS/first.atcNS)
	}
	r.note("hot set: each device reuses %d page-aligned %s buffers, one at a fixed place in each MR (%s, the reach of the %d-entry ATC of 4 KiB pages);",
		trHotBufs, sizeName(trHotSize), sizeName(trHotBufs*trHotSize), twolevel.DefaultATCEntries)
	r.note("  %d%% of DMAs fall inside them, the rest anywhere in the MRs; devices interleave uniformly. Keys without a suffix are the hot set's,", trHotPct)
	r.note("  keys ending _uniform (and _uniform_<n>) the uniform pattern's: DMAs anywhere in the MRs, no reuse, the ATC's worst case.")
	r.note("ratio = 2-level / eMTT ns per DMA, translation against translation (VFIO pinned everything at start, so the model pays nothing per DMA for pinning);")
	r.note("  + pins = the eMTT with the PVDMA pin references the engine takes per DMA and drops after it (a pvdma.Hold), ratio_pins = 2-level / that;")
	r.note("emtt_flatness, pins_flatness and atc_growth = ns at %d devices / ns at %d.",
		devCounts[len(devCounts)-1], devCounts[0])
	r.note("The model adds no delay: an ATC miss costs only its page walk here, not the ~1 us PCIe round trip to the IOMMU it costs on a real NIC, so the ratio understates the gap.")
	r.note("ATC of %d entries, GOMAXPROCS=%d", twolevel.DefaultATCEntries, runtime.GOMAXPROCS(0))
	return nil
}

// parseDeviceCounts parses --devices: a comma-separated list of counts,
// returned sorted without duplicates.
func parseDeviceCounts(s string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > trMaxDevices {
			return nil, fmt.Errorf("--devices %q: %q is not a device count in 1..%d", s, f, trMaxDevices)
		}
		counts = append(counts, n)
	}
	slices.Sort(counts)
	return slices.Compact(counts), nil
}

// translateGuest maps the guest RAM every device shares: trMRs untouched
// anonymous regions, 256 MiB apart in guest physical space. unmap
// releases them.
func translateGuest() (guest []guestmem.Region, unmap func(), err error) {
	unmap = func() {
		for _, g := range guest {
			g.Mapping.Unmap()
		}
	}
	for k := range trMRs {
		m, err := guestmem.MapAnonymous(trRegionSize)
		if err != nil {
			unmap()
			return nil, nil, fmt.Errorf("guest region %d: %w", k, err)
		}
		guest = append(guest, guestmem.Region{GuestPhys: uint64(k) << 28, Size: trRegionSize, UserAddr: 0x7e00_0000_0000 + uint64(k)<<28, Mapping: m})
	}
	return guest, unmap, nil
}

type trResult struct {
	emttNS, atcNS float64 // per DMA
	pinsNS        float64 // eMTT with pin references, per DMA
	hitPct        float64 // ATC hits in the timed rounds
	pagesPerDMA   float64
	modelBytes    uint64 // IOMMU page tables and MTT page entries
}

// trBench drives n devices' translations: the loops the suite times.
type trBench struct {
	nic *twolevel.NIC
	// devs holds the devices by value: the harness's own lookup of a
	// DMA's device is an array index, not a pointer chase (a cache miss
	// per DMA with a thousand devices, which neither path should pay).
	devs  []trDevice
	views []guestmem.View
	hold  pvdma.Hold
	sink  uint64 // keeps the model's results live
}

// emtt translates seq through the eMTTs; with pin, it takes the pin
// references of each DMA and releases them after it, as the device does.
func (b *trBench) emtt(seq []trAccess, pin bool) error {
	var h *pvdma.Hold
	if pin {
		h = &b.hold
	}
	for _, a := range seq {
		d := &b.devs[a.dev]
		var err error
		b.views, err = d.tab.Translate(b.views[:0], h, d.ekeys[a.mr], trPD, abi.AccessRemoteWrite, a.iova, uint64(a.n))
		if h != nil {
			h.Release()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// model translates seq through the two-level model.
func (b *trBench) model(seq []trAccess) error {
	for _, a := range seq {
		d := &b.devs[a.dev]
		hpa, err := b.nic.Translate(d.model, d.mkeys[a.mr], trPD, abi.AccessRemoteWrite, a.iova, uint64(a.n))
		if err != nil {
			return err
		}
		b.sink += hpa
	}
	return nil
}

func (b *trBench) close() {
	for i := range b.devs {
		b.devs[i].cache.Close()
	}
}

// timed runs f after a GC, so that no collection of the setup's garbage
// lands in it, then again, and returns the second run's time: the GC and
// the other path's loop before it leave the caches cold, and with a
// thousand devices warming them up again is a fifth of a quick run.
func timed(f func() error) (time.Duration, error) {
	runtime.GC()
	if err := f(); err != nil {
		return 0, err
	}
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}

// measureTranslate builds n devices and measures every pattern of
// trPatterns on them, in that order.
func measureTranslate(ctx context.Context, guest []guestmem.Region, n, accesses, rounds int) ([]trResult, error) {
	b, modelBytes, err := buildTranslateBench(guest, n)
	defer b.close()
	if err != nil {
		return nil, err
	}
	var out []trResult
	for _, pat := range trPatterns {
		res, err := measurePattern(ctx, b, translateSequence(n, accesses, pat.hotPct), rounds)
		if err != nil {
			return nil, fmt.Errorf("%s pattern: %w", pat.name, err)
		}
		res.modelBytes = modelBytes
		out = append(out, res)
	}
	return out, nil
}

func measurePattern(ctx context.Context, b *trBench, seq []trAccess, rounds int) (trResult, error) {
	// Warm: pins every chunk the sequence touches, fills the caches.
	if err := b.emtt(seq, true); err != nil {
		return trResult{}, fmt.Errorf("eMTT: %w", err)
	}
	if err := b.model(seq); err != nil {
		return trResult{}, fmt.Errorf("model: %w", err)
	}
	atc0, st0 := b.nic.ATC().Stats(), b.nic.Stats()
	var bestE, bestP, bestM time.Duration
	for round := range rounds {
		if err := ctx.Err(); err != nil {
			return trResult{}, err
		}
		e, err := timed(func() error { return b.emtt(seq, false) })
		if err != nil {
			return trResult{}, fmt.Errorf("eMTT: %w", err)
		}
		pins, err := timed(func() error { return b.emtt(seq, true) })
		if err != nil {
			return trResult{}, fmt.Errorf("eMTT with pins: %w", err)
		}
		m, err := timed(func() error { return b.model(seq) })
		if err != nil {
			return trResult{}, fmt.Errorf("model: %w", err)
		}
		if round == 0 || e < bestE {
			bestE = e
		}
		if round == 0 || pins < bestP {
			bestP = pins
		}
		if round == 0 || m < bestM {
			bestM = m
		}
	}
	if b.sink == 0 {
		return trResult{}, fmt.Errorf("model translated nothing")
	}
	atc, st := b.nic.ATC().Stats(), b.nic.Stats()
	hits, misses := atc.Hits-atc0.Hits, atc.Misses-atc0.Misses
	return trResult{
		emttNS:      float64(bestE.Nanoseconds()) / float64(len(seq)),
		pinsNS:      float64(bestP.Nanoseconds()) / float64(len(seq)),
		atcNS:       float64(bestM.Nanoseconds()) / float64(len(seq)),
		hitPct:      100 * float64(hits) / float64(hits+misses),
		pagesPerDMA: float64(st.Pages-st0.Pages) / float64(st.Translations-st0.Translations),
	}, nil
}

// buildTranslateBench makes n devices whose guest RAM is guest, each with
// its MRs in both tables, on one NIC, and returns them with the bytes of
// the model's tables. The bench is closed even on error.
func buildTranslateBench(guest []guestmem.Region, n int) (*trBench, uint64, error) {
	pool := pvdma.NewPool(0, pvdma.NopPinner{})
	b := &trBench{nic: twolevel.NewNIC(twolevel.DefaultATCEntries), devs: make([]trDevice, 0, n)}
	var modelBytes uint64
	for i := range n {
		mem, err := guestmem.NewTable(guest)
		if err != nil {
			return b, 0, err
		}
		b.devs = append(b.devs, trDevice{cache: pool.NewCache(pvdma.Options{Name: fmt.Sprintf("dev%d", i)})})
		d := &b.devs[i] // capacity n: never moves
		if err := d.cache.SetMemory(mem); err != nil {
			return b, 0, err
		}
		d.tab = emtt.New(16, d.cache)
		if d.model, err = b.nic.AddDevice(mem); err != nil {
			return b, 0, err
		}
		modelBytes += uint64(d.model.Domain().Tables()) * twolevel.PageSize
		for k := range trMRs {
			spec := emtt.Spec{PD: trPD, Access: abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead,
				IOVA: trIOVA(k), Length: trMRSize, Spans: []emtt.Span{{GPA: trGPA(k), Len: trMRSize}}}
			er, err := d.tab.Insert(mem, spec)
			if err != nil {
				return b, 0, fmt.Errorf("eMTT MR %d: %w", k, err)
			}
			mr, err := d.model.Register(spec)
			if err != nil {
				return b, 0, fmt.Errorf("MTT MR %d: %w", k, err)
			}
			d.ekeys[k], d.mkeys[k] = er.Key, mr.Key
			modelBytes += (trMRSize / twolevel.PageSize) * 8
		}
	}
	return b, modelBytes, nil
}

// trHotOffset is where device dev's hot buffer j starts in MR j: page
// aligned, drawn from a seed of its own, so that a device's buffers are
// in the same places at every device count.
func trHotOffset(dev uint32, j int) uint64 {
	rng := rand.New(rand.NewPCG(trSeed^0x407, uint64(dev)<<8|uint64(j)))
	return rng.Uint64N((trMRSize-trHotSize)/twolevel.PageSize+1) * twolevel.PageSize
}

// translateSequence draws n DMAs over the given number of devices: device
// uniform, size from trSizes; hotPct% of them at a cache-line-aligned
// offset inside one of the device's hot buffers (chosen uniformly), the
// rest in an MR chosen uniformly at a cache-line-aligned offset uniform
// within it.
func translateSequence(devices, n, hotPct int) []trAccess {
	rng := rand.New(rand.NewPCG(trSeed, uint64(devices)<<8|uint64(hotPct)))
	hot := make([][trHotBufs]uint64, devices)
	for dev := range hot {
		for j := range trHotBufs {
			hot[dev][j] = trHotOffset(uint32(dev), j)
		}
	}
	seq := make([]trAccess, n)
	for i := range seq {
		a := trAccess{dev: uint16(rng.IntN(devices)), n: uint32(trSizes[rng.IntN(len(trSizes))])}
		if rng.IntN(100) < hotPct {
			j := rng.IntN(trHotBufs)
			a.mr = uint16(j)
			a.iova = trIOVA(j) + hot[a.dev][j] + rng.Uint64N((trHotSize-uint64(a.n))/64+1)*64
		} else {
			mr := rng.IntN(trMRs)
			a.mr = uint16(mr)
			a.iova = trIOVA(mr) + rng.Uint64N((trMRSize-uint64(a.n))/64+1)*64
		}
		seq[i] = a
	}
	return seq
}
