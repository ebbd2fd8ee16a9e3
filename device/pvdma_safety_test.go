package device

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/sim/frontend"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestPVDMASafety drives two devices on one fabric, each behind a real
// vhost.Backend and a simulated VM (memfd guest RAM), through seeded
// random sequences of: REG_MR (in guest RAM, next to and over the
// doorbells, in hot-added memory, outside RAM; contiguous and page lists),
// DEREG_MR, RDMA WRITE / READ / SEND between the devices, ADD_MEM_REG of
// fresh memfds (also where a removed one was), REM_MEM_REG, SET_MEM_TABLE
// while running (regions kept, moved or dropped), removals and DEREG_MR /
// RESET_STATE racing bursts of WRITEs, RESET_STATE, device reset,
// stop/start, reconnect and, in the guest-RAM fallback,
// SET_DOORBELL_AREA (in RAM or in hot-added memory). The seeds cover
// every pairing of doorbell modes and every pin mode, with and without
// budgets that make the LRU evict. Every status is predicted by a model
// and every byte of test memory is compared with a shadow copy after
// every step, so a DMA landing anywhere but its destination is caught.
// After every step:
//
//   - no doorbell byte (the shared-memory region, or the fallback's area
//     in guest RAM) holds DMA payload, and the fallback area's bytes past
//     the doorbells never change;
//   - memory removed from the guest (REM_MEM_REG, SET_MEM_TABLE, reset,
//     reconnect) never changes again, though the test keeps it mapped;
//   - no doorbell page is pinned: the kernel's view (VM_LOCKED in
//     /proc/self/smaps) of the daemon's mappings and the live pins the
//     Pinner was handed never cover one, and the doorbell memfd backs no
//     cache area;
//   - what the kernel has locked in each device's mappings, what the
//     Pinner holds and what the caches and the pool report agree exactly,
//     and the Pinner never pinned a range twice or failed to unpin one
//     (munlock fails once the memory is unmapped);
//   - a successful DMA's source and destination are pinned, and the
//     destination holds exactly the payload.
//
// At the end both devices close and nothing is pinned any more. The
// Pinner is the real MlockPinner, wrapped to keep books.
//
// Seeds are deterministic; VSTELLAR_PVDMA_SEED=n (and
// VSTELLAR_PVDMA_STEPS=m) runs just one.
func TestPVDMASafety(t *testing.T) {
	pvNeedRoot(t)
	seeds := []uint64{1, 2, 3, 4, 5}
	steps := 100
	if testing.Short() {
		seeds, steps = seeds[:3], 50
	}
	if v := os.Getenv("VSTELLAR_PVDMA_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VSTELLAR_PVDMA_SEED=%q: %v", v, err)
		}
		seeds = []uint64{s}
	}
	if v := os.Getenv("VSTELLAR_PVDMA_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("VSTELLAR_PVDMA_STEPS=%q: %v", v, err)
		}
		steps = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			var setup pvSetup
			if seed <= uint64(len(pvSetups)) {
				setup = pvSetups[seed-1]
			} else {
				rng := rand.New(rand.NewPCG(seed, 1))
				setup.modes = [2]pvdma.Mode{pvdma.Mode(rng.IntN(3)), pvdma.Mode(rng.IntN(3))}
			}
			// Bits 0 and 1 of the seed pick each side's doorbell mode, so
			// four consecutive seeds cover every pairing.
			setup.fallback = [2]bool{seed&1 == 1, seed&2 == 2}
			newPVRun(t, seed, setup).run(steps, nil)
		})
	}
}

// TestPVDMARemovalRacesDMA concentrates on DMA in flight while memory
// goes away under a running engine: bursts of large RDMA WRITEs into or
// out of hot-added memory racing REM_MEM_REG or SET_MEM_TABLE (and
// DEREG_MR, RESET_STATE), with the checks of TestPVDMASafety after each.
func TestPVDMARemovalRacesDMA(t *testing.T) {
	pvNeedRoot(t)
	steps := 60
	if testing.Short() {
		steps = 20
	}
	// On demand, with budgets: the LRU evicts while memory goes away.
	r := newPVRun(t, 100, pvSetup{modes: [2]pvdma.Mode{pvdma.ModeOnDemand, pvdma.ModeOnDemand},
		budget: [2]uint64{pvBudget, pvBudget}, hostLimit: 2 * pvBudget})
	// Only removals under a running engine, and removed memory is
	// watched for ten steps (not for ever: there are many).
	r.live, r.maxAdds, r.keepGone = true, 1<<20, 10
	r.run(steps, func() {
		s := r.sides[r.rng.IntN(2)]
		switch k := r.rng.IntN(10); {
		case k < 2 || len(s.hot) == 0:
			r.hotAdd(s)
		case k < 9:
			r.racingRemove(s)
		default:
			r.racingControl(s)
		}
	})
}

// pvNeedRoot skips, outside CI, where the tests cannot run: they mlock
// guest memory with no budget (CAP_IPC_LOCK) and open guest RAM through
// /proc/self/map_files (CAP_SYS_ADMIN).
func pvNeedRoot(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("needs root: mlock without RLIMIT_MEMLOCK, /proc/self/map_files")
	}
}

const (
	pvArenaSize = 4 << 20   // guest RAM MRs (and the fallback doorbell area) live in
	pvHotBase   = 1 << 30   // hot-added regions: slot i at pvHotBase + i*pvHotStride
	pvHotStride = 32 << 20  //
	pvHotSlots  = 6         //
	pvMaxHot    = 2         // live hot-added regions per side
	pvMaxAdds   = 5         // hot-adds per side and seed (removed memfds are checked every step)
	pvMaxMRs    = 40        // live MRs per side
	pvCQEntries = 64        //
	pvSQSize    = 16        // send queue entries: racingWrite posts bursts
	pvMaxPages  = 12        // page-list MRs
	pvMinDMA    = 32        // every payload holds the magic at least once
	pvMaxDMA    = 1 << 20   //
	pvOutside   = 512 << 20 // a guest physical address that is never RAM
	pvPage      = 4096
	// pvMagic starts every 16 bytes of payload. Its bytes all have the
	// high bit set; the noise test memory starts with never does, so the
	// magic anywhere means a DMA put it there.
	pvMagic = "\xd5\xc4\xa1\x9b\xe7\xf0\x8d\xb2"
)

// pvSetup is a run's two devices: doorbell modes, pin modes and budgets.
type pvSetup struct {
	fallback  [2]bool
	modes     [2]pvdma.Mode
	budget    [2]uint64
	hostLimit uint64
}

// pvSetups are the pin setups of seeds 1..5 (later seeds pick modes at
// random, without limits). Budgets make the LRU evict (on demand only: in
// the other modes registration or memory changes would fail, which the
// model does not predict); they leave room for what a device holds
// pinned at once: the chunk of its QP's and CQ's rings (build keeps them
// in one) and those of one DMA (two: at most 1 MiB contiguous, or pages
// of one chunk).
var pvSetups = []pvSetup{
	{modes: [2]pvdma.Mode{pvdma.ModeAll, pvdma.ModeOnDemand}, budget: [2]uint64{0, pvBudget}},
	{modes: [2]pvdma.Mode{pvdma.ModeOnDemand, pvdma.ModeAtRegMR}},
	{modes: [2]pvdma.Mode{pvdma.ModeOnDemand, pvdma.ModeOnDemand}, hostLimit: 2 * pvBudget},
	{modes: [2]pvdma.Mode{pvdma.ModeAtRegMR, pvdma.ModeAll}},
	{modes: [2]pvdma.Mode{pvdma.ModeOnDemand, pvdma.ModeOnDemand}, budget: [2]uint64{pvBudget, 0}, hostLimit: 2 * pvBudget},
}

// pvBudget is a device's pin budget in the setups that have one.
const pvBudget = 3 * pvdma.ChunkSize

// pvAccesses are the access flags MRs are registered with.
var pvAccesses = []abi.Access{
	abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead,
	abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead,
	abi.AccessLocalWrite | abi.AccessRemoteWrite,
	abi.AccessLocalWrite | abi.AccessRemoteRead,
	abi.AccessLocalWrite,
	abi.AccessRemoteRead,
	0,
}

type pvOp uint8

const (
	pvWrite pvOp = iota
	pvRead
	pvSend
)

func (o pvOp) String() string { return [...]string{"WRITE", "READ", "SEND"}[o] }

// pvRun is one seed's run.
type pvRun struct {
	t      *testing.T
	rng    *rand.Rand
	step   int
	pool   *pvdma.Pool
	pinner *pvPinner
	sides  [2]*pvSide
	hist   []string
	// raced counts racing WRITE bursts by outcome (all landed, cut
	// short).
	raced [2]int
	// stale counts DMAs through MRs whose memory was removed while
	// another memfd is plugged in at the same address.
	stale int
	// live restricts racingRemove to removals under a running engine
	// (REM_MEM_REG, SET_MEM_TABLE). maxAdds bounds hot-adds per side;
	// keepGone, if not 0, is how many steps removed memory is watched.
	live     bool
	maxAdds  int
	keepGone int
	// areasInHot counts doorbell areas placed in hot-added memory,
	// areasLost those whose memory was then removed.
	areasInHot, areasLost int
}

// pvSide is one VM with its device and the test's model of it.
type pvSide struct {
	r        *pvRun
	name     string
	d        *Device
	g        *vmGuest
	fallback bool
	peer     *pvSide

	pdn    uint32
	cq     abi.CreateCQResp
	cqRing uint64
	cqCons uint32
	qpReq  *abi.CreateQPReq
	qp     abi.CreateQPResp
	sqProd uint32
	rqProd uint32

	mode   pvdma.Mode
	arena  uint64
	shadow []byte // what the arena must hold
	plist  uint64 // page lists for REG_MR
	// area is the fallback doorbell area (areaLen 0: none registered),
	// in the arena or in areaHot. areaLost: its memory was removed, the
	// device stopped its engine and the driver must reset.
	area, areaLen uint64
	areaHot       *pvHot
	areaLost      bool
	areaTail      []byte // the area's bytes past the doorbells, at SET_DOORBELL_AREA
	ramfd         int    // see ramFD

	mrs  []*pvMR
	dead []uint32 // keys deregistered or dropped by a reset
	hot  []*pvHot // hot-added regions in the guest's memory table
	gone []*pvHot // removed ones, still mapped by the test
	adds int

	// nearDoorbells counts successful DMAs into or out of the 2 MiB
	// chunks holding the fallback doorbell area.
	nearDoorbells int
	// pinnedNow is the memory of this step's successful DMA, which must
	// be pinned when the step's checks run.
	pinnedNow []emtt.Span
}

// pvMR is a registered MR as the model sees it.
type pvMR struct {
	key    uint32
	iova   uint64
	length uint64
	spans  []emtt.Span // guest physical, in IOVA order
	access abi.Access
	hot    *pvHot // the memory it is in (nil: the arena)
	valid  bool   // its memory is still the guest's
	dead   bool   // a stale key standing in for an MR
}

func (m *pvMR) usable(need abi.Access) bool { return !m.dead && m.valid && m.access&need == need }

// at returns the guest physical spans behind [off, off+n) of the MR.
func (m *pvMR) at(off, n uint64) []emtt.Span {
	var out []emtt.Span
	for _, sp := range m.spans {
		if n == 0 {
			break
		}
		if off >= sp.Len {
			off -= sp.Len
			continue
		}
		take := min(sp.Len-off, n)
		out = append(out, emtt.Span{GPA: sp.GPA + off, Len: take})
		off, n = 0, n-take
	}
	return out
}

func (m *pvMR) String() string {
	if m.dead {
		return fmt.Sprintf("stale key %#x", m.key)
	}
	where := "arena"
	if m.hot != nil {
		where = fmt.Sprintf("hot@%#x", m.hot.gpa)
	}
	return fmt.Sprintf("mr %#x [%s iova %#x+%#x access %#x valid %v spans %v]", m.key, where, m.iova, m.length, uint32(m.access), m.valid, m.spans)
}

// pvHot is a hot-added memfd region.
type pvHot struct {
	gpa, size uint64
	fd        int
	m         *guestmem.Mapping // the test's own mapping
	region    frontend.MemRegion
	shadow    []byte // what it must hold (frozen once removed)
	goneAt    int    // the step that removed it
}

func (h *pvHot) bytes() []byte { return h.m.View().Bytes() }

// newPVRun creates a run: the two devices on one fabric and one pool,
// their VMs, and their QPs connected.
func newPVRun(t *testing.T, seed uint64, setup pvSetup) *pvRun {
	r := &pvRun{t: t, rng: rand.New(rand.NewPCG(seed, 0x5eed_0f_d0e_be11)), pinner: &pvPinner{live: map[uintptr]int{}}, maxAdds: pvMaxAdds}
	r.pool = pvdma.NewPool(setup.hostLimit, r.pinner)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("last steps of seed %d:\n%s", seed, strings.Join(r.hist[max(0, len(r.hist)-40):], "\n"))
		if strings.HasPrefix(t.Name(), "TestPVDMASafety/") {
			t.Logf("reproduce with: VSTELLAR_PVDMA_SEED=%d go test -race -run TestPVDMASafety ./device/", seed)
		} else {
			t.Logf("the steps are deterministic but the races are not: rerun %s", t.Name())
		}
	})
	fab := fabric.NewLocal()
	for i := range r.sides {
		fallback := setup.fallback[i]
		cfg := Config{Name: fmt.Sprintf("pv%d%c", seed, 'a'+i), Fabric: fab, Pins: r.pool, PinMode: setup.modes[i], PinBudget: setup.budget[i],
			Limits: abi.Limits{MaxMR: 256}}
		if i == 0 {
			// A two-page doorbell area, deep inside a 2 MiB chunk; the
			// other side keeps the default 129 pages.
			cfg.Limits.MaxQP, cfg.Limits.MaxCQ = 16, 16
		}
		r.sides[i] = r.newSide(cfg, fallback)
		r.logf("%s: fallback %v, pin mode %v, budget %#x, doorbells %#x bytes", cfg.Name, fallback, cfg.PinMode, cfg.PinBudget,
			r.sides[i].d.DoorbellLayout().Size())
	}
	a, b := r.sides[0], r.sides[1]
	a.peer, b.peer = b, a
	r.link()
	r.checkAll()
	return r
}

// run runs steps steps (of doStep if step is nil), checking after each,
// and finishes.
func (r *pvRun) run(steps int, step func()) {
	if step == nil {
		step = r.doStep
	}
	for r.step = 1; r.step <= steps; r.step++ {
		at := r.step
		step()
		if r.t.Failed() {
			return
		}
		for _, side := range r.sides {
			if side.areaLost {
				r.recover(side)
			}
		}
		r.checkAll()
		if r.t.Failed() {
			return
		}
		if r.step != at {
			r.fatalf("step counter moved")
		}
	}
	r.finish()
}

func (r *pvRun) logf(format string, args ...any) {
	r.hist = append(r.hist, fmt.Sprintf("%4d ", r.step)+fmt.Sprintf(format, args...))
}

func (r *pvRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("step %d: %s", r.step, fmt.Sprintf(format, args...))
}

func (r *pvRun) newSide(cfg Config, fallback bool) *pvSide {
	t, name := r.t, cfg.Name
	d := newDevice(t, cfg)
	g := startVM(t, d, vmOpts{noShmem: fallback})
	fe := g.vm.Frontend()
	for _, p := range []uint{frontend.ProtoReplyAck, frontend.ProtoConfigureMemSlots, frontend.ProtoResetDevice} {
		// Without REPLY_ACK a memory change could still be under way
		// when the test looks at the removed memory.
		if !fe.HasProtocol(p) {
			t.Fatalf("protocol feature %d not negotiated", p)
		}
	}
	want := DoorbellShmem
	if fallback {
		want = DoorbellGuestRAM
	}
	if m := d.DoorbellMode(); m != want {
		t.Fatalf("%s: doorbell mode %v, want %v", name, m, want)
	}
	s := &pvSide{r: r, name: name, d: d, g: g, fallback: fallback, mode: cfg.PinMode}
	s.arena = g.alloc(pvArenaSize, pvdma.ChunkSize)
	s.plist = g.alloc(pvMaxPages*8, pvPage)
	s.shadow = pvNoise(r.rng, pvArenaSize)
	copy(g.bytes(s.arena, pvArenaSize), s.shadow)
	t.Cleanup(func() {
		for _, h := range append(s.hot, s.gone...) {
			h.m.Unmap()
			unix.Close(h.fd)
		}
	})
	s.build()
	return s
}

// build creates the side's objects: a PD, the doorbell area in the
// fallback, a CQ and an RC QP.
func (s *pvSide) build() {
	g := s.g
	s.pdn = g.allocPD()
	if s.fallback {
		s.setArea()
	}
	// The rings' memory stays pinned while the QP and CQ live: keep it
	// in one 2 MiB chunk (see pvSetups).
	if next := g.alloc(pvPage, pvPage); next%pvdma.ChunkSize > pvdma.ChunkSize-256<<10 {
		g.alloc(pvdma.ChunkSize-next%pvdma.ChunkSize, pvPage)
	}
	s.cqRing = g.cqRing(pvCQEntries)
	g.must(abi.OpCreateCQ, &abi.CreateCQReq{RingAddr: s.cqRing, Entries: pvCQEntries}, &s.cq)
	s.cqCons = 0
	// Room for bursts of WRITEs (racingWrite).
	s.qpReq = g.qpReq(s.pdn, s.cq.CQN, s.cq.CQN)
	ss := abi.SendWQEStride(s.qpReq.MaxSendSGE, s.qpReq.MaxInlineData)
	s.qpReq.SQSize, s.qpReq.SQAddr = pvSQSize, g.alloc(uint64(pvSQSize*ss), uint64(ss))
	g.must(abi.OpCreateQP, s.qpReq, &s.qp)
	s.sqProd, s.rqProd = 0, 0
}

// setArea registers a fallback doorbell area at a random page (rarely
// 2 MiB aligned) of the arena or, sometimes, of hot-added memory,
// sometimes first showing that it cannot go over a live MR.
func (s *pvSide) setArea() {
	r, rng := s.r, s.r.rng
	n := s.d.DoorbellLayout().Size() + uint64(rng.IntN(3))*pvPage
	base, size := s.arena, uint64(pvArenaSize)
	s.areaHot, s.areaLost = nil, false
	if len(s.hot) > 0 && rng.IntN(2) == 0 {
		if h := s.hot[rng.IntN(len(s.hot))]; h.size >= n {
			base, size, s.areaHot = h.gpa, h.size, h
			r.areasInHot++
		}
	}
	gpa := base + rng.Uint64N((size-n)/pvPage+1)*pvPage
	if rng.IntN(2) == 0 {
		var mr abi.RegMRResp
		off := rng.Uint64N(n/pvPage) * pvPage
		s.g.must(abi.OpRegMR, &abi.RegMRReq{PDN: s.pdn, IOVA: gpa + off, Length: pvPage, Addr: gpa + off}, &mr)
		s.g.want(abi.StatusBadAddress, abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: gpa, Length: n})
		s.g.must(abi.OpDeregMR, &abi.HandleReq{Handle: mr.LKey}, nil)
		s.dead = append(s.dead, mr.LKey)
	}
	if rng.IntN(2) == 0 {
		// An MR right next to the area, registered first: in
		// pvdma.ModeAtRegMR it holds the chunk the area will be cut out
		// of.
		sp := emtt.Span{GPA: gpa + n, Len: min(pvMinDMA*2+rng.Uint64N(64<<10), base+size-gpa-n)}
		if rng.IntN(2) == 0 || sp.Len < pvMinDMA*2 {
			sp.Len = min(pvMinDMA*2+rng.Uint64N(64<<10), gpa-base)
			sp.GPA = gpa - sp.Len
		}
		if sp.Len >= pvMinDMA*2 {
			acc := abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead
			var mr abi.RegMRResp
			s.g.must(abi.OpRegMR, &abi.RegMRReq{PDN: s.pdn, Access: acc, IOVA: sp.GPA, Length: sp.Len, Addr: sp.GPA}, &mr)
			s.mrs = append(s.mrs, &pvMR{key: mr.LKey, iova: sp.GPA, length: sp.Len, spans: []emtt.Span{sp}, access: acc, hot: s.areaHot, valid: true})
		}
	}
	s.g.must(abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: gpa, Length: n}, nil)
	s.area, s.areaLen = gpa, n
	size = s.d.DoorbellLayout().Size()
	s.areaTail = bytes.Clone(s.view(gpa+size, n-size).Bytes())
	r.logf("%s: doorbell area %#x+%#x", s.name, gpa, n)
	// Nothing pinned may cover the area from now on.
	s.checkPinsClearOfDoorbells(pvReadVMAs(r.t))
}

// link connects the two QPs to each other.
func (r *pvRun) link() {
	acc := abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead
	a, b := r.sides[0], r.sides[1]
	a.g.connect(a.qp.QPN, b.d.GID(), b.qp.QPN, acc)
	b.g.connect(b.qp.QPN, a.d.GID(), a.qp.QPN, acc)
}

// relink returns the QPs of the sides given to RESET and connects both
// QPs again (after an error completion, or when one side's QP is new).
func (r *pvRun) relink(reset ...*pvSide) {
	for _, s := range reset {
		s.g.must(abi.OpModifyQP, &abi.ModifyQPReq{QPN: s.qp.QPN, AttrMask: abi.QPAttrState, Attr: abi.QPAttr{State: abi.QPStateReset}}, nil)
		s.sqProd, s.rqProd = 0, 0
	}
	r.link()
}

// doStep runs one random step.
func (r *pvRun) doStep() {
	s := r.sides[r.rng.IntN(2)]
	switch k := r.rng.IntN(100); {
	case k < 20:
		r.regMR(s)
	case k < 27:
		r.deregMR(s)
	case k < 45:
		r.dma(s, pvWrite)
	case k < 54:
		r.dma(s, pvRead)
	case k < 61:
		r.dma(s, pvSend)
	case k < 66:
		r.dmaNearDoorbells(s)
	case k < 70:
		r.remap(s)
	case k < 75:
		r.hotAdd(s)
	case k < 79:
		r.hotRemove(s)
	case k < 83:
		r.racingRemove(s)
	case k < 85:
		r.racingControl(s)
	case k < 87:
		r.logf("%s: RESET_STATE", s.name)
		s.g.must(abi.OpResetState, nil, nil)
		s.checkDropped()
		s.dropObjects()
		s.build()
		r.relink(s.peer)
	case k < 89:
		r.deviceReset(s, true)
	case k < 91:
		r.deviceReset(s, false)
	case k < 92:
		r.logf("%s: reconnect", s.name)
		if err := s.g.vm.Reconnect(s.g.ctx); err != nil {
			r.fatalf("%s: reconnect: %v", s.name, err)
		}
		wait.For(r.t, "re-activation", s.d.active.Load)
		s.memoryReplaced()
	case k < 95:
		// One doorbell area per reset, and none in shared-memory mode.
		r.logf("%s: SET_DOORBELL_AREA again", s.name)
		s.g.want(abi.StatusBadState, abi.OpSetDoorbellArea, &abi.SetDoorbellAreaReq{Addr: s.arena, Length: s.d.DoorbellLayout().Size()})
	default:
		r.dmaNearDoorbells(s)
	}
}

// deviceReset is the guest resetting the device (virtio reset: the
// front-end stops it and sends the memory table again when the driver
// restarts it); with drop, the front-end also sends RESET_DEVICE. Either
// way the driver's objects are dropped: RESET_DEVICE drops them, and
// without it the restarted driver starts every ring at index 0, which
// tells the back-end a new driver came (vhost's dropStaleState).
func (r *pvRun) deviceReset(s *pvSide, drop bool) {
	r.logf("%s: device reset (drop objects %v)", s.name, drop)
	vm := s.g.vm
	if err := vm.Reset(s.g.ctx); err != nil {
		r.fatalf("%s: reset: %v", s.name, err)
	}
	if drop {
		if err := vm.Frontend().ResetDevice(s.g.ctx); err != nil {
			r.fatalf("%s: RESET_DEVICE: %v", s.name, err)
		}
	}
	if err := vm.Start(s.g.ctx); err != nil {
		r.fatalf("%s: restart: %v", s.name, err)
	}
	wait.For(r.t, "re-activation", s.d.active.Load)
	s.memoryReplaced()
	s.checkDropped()
	s.dropObjects()
	s.build()
	r.relink(s.peer)
}

// checkDropped checks that a reset that dropped the objects unpinned what
// was pinned on demand (all that is pinned, but in pvdma.ModeAll).
func (s *pvSide) checkDropped() {
	if n := s.d.pins.Stats().PinnedBytes; n != 0 && s.mode != pvdma.ModeAll {
		s.r.fatalf("%s: %#x bytes still pinned after the reset (pin mode %v)", s.name, n, s.mode)
	}
}

// dropObjects updates the model for a reset that dropped every object.
func (s *pvSide) dropObjects() {
	for _, m := range s.mrs {
		s.dead = append(s.dead, m.key)
	}
	s.mrs = nil
	if s.areaLen > 0 && !s.areaLost {
		// The records the device left there are ordinary guest bytes
		// now.
		mem, sh := s.where(emtt.Span{GPA: s.area, Len: s.areaLen})
		copy(sh, mem)
	}
	s.areaLen, s.areaHot, s.areaLost = 0, nil, false
}

// recover resets a side whose doorbell area's memory went away.
func (r *pvRun) recover(s *pvSide) {
	r.logf("%s: doorbell area's memory removed; RESET_STATE", s.name)
	r.areasLost++
	s.g.must(abi.OpResetState, nil, nil)
	s.dropObjects()
	s.build()
	r.relink(s.peer)
}

// memoryReplaced updates the model for a new memory table that has only
// the VM's own RAM (SET_MEM_TABLE at a restart or reconnect): every
// hot-added region is gone.
func (s *pvSide) memoryReplaced() {
	for len(s.hot) > 0 {
		s.retire(s.hot[0], nil)
	}
}

// retire moves h to the removed regions: its bytes are frozen from here on
// (they must equal what the model expects now, or exp if not nil), and
// its MRs are invalid.
func (s *pvSide) retire(h *pvHot, exp []byte) {
	if exp == nil {
		exp = h.shadow
	}
	if h == s.areaHot && s.areaLen > 0 {
		// The doorbell records were the device's: no payload, and
		// frozen as they are.
		o := s.area - h.gpa
		area := h.bytes()[o : o+s.areaLen]
		s.checkArea(area)
		copy(exp[o:], area)
		s.areaLost = true
	}
	if i := pvFirstDiff(h.bytes(), exp); i >= 0 {
		s.r.fatalf("%s: hot region %#x at its removal: byte %#x is %#x, want %#x", s.name, h.gpa, i, h.bytes()[i], exp[i])
	}
	h.shadow, h.goneAt = exp, s.r.step
	s.hot = slices.DeleteFunc(s.hot, func(x *pvHot) bool { return x == h })
	s.gone = append(s.gone, h)
	for _, m := range s.mrs {
		if m.hot == h {
			m.valid = false
		}
	}
}

// remap sends SET_MEM_TABLE while the device runs: the VM's RAM as it
// is, and each hot-added region kept where it is, moved to another
// address (the same memfd: its MRs go invalid, as it is not where they
// were registered) or left out (removed). Every region gets a new
// mapping in the daemon, so every pin moves.
func (r *pvRun) remap(s *pvSide) {
	rng := r.rng
	fe := s.g.vm.Frontend()
	regs := s.g.vm.Regions()
	fds := []int{s.ramFD()}
	used := map[uint64]bool{}
	for _, h := range s.hot {
		used[(h.gpa-pvHotBase)/pvHotStride] = true
	}
	var dropped []*pvHot
	type move struct {
		h   *pvHot
		old uint64
	}
	var moved []move
	for _, h := range s.hot {
		switch rng.IntN(5) {
		case 0:
			dropped = append(dropped, h)
			continue
		case 1, 2:
			for {
				if slot := rng.Uint64N(pvHotSlots); !used[slot] {
					used[slot] = true
					moved = append(moved, move{h, h.gpa})
					h.gpa = pvHotBase + slot*pvHotStride + rng.Uint64N(512)*pvPage
					h.region.GuestPhys = h.gpa
					break
				}
			}
		}
		regs = append(regs, h.region)
		fds = append(fds, h.fd)
	}
	r.logf("%s: SET_MEM_TABLE %+v (moved %d, dropped %d)", s.name, regs, len(moved), len(dropped))
	if err := fe.SetMemTable(s.g.ctx, regs, fds); err != nil {
		r.fatalf("%s: SET_MEM_TABLE: %v", s.name, err)
	}
	for _, h := range dropped {
		s.retire(h, nil)
	}
	for _, mv := range moved {
		h := mv.h
		for _, m := range s.mrs {
			if m.hot == h {
				m.valid = false
			}
		}
		if h == s.areaHot && s.areaLen > 0 && !s.areaLost {
			// The doorbells are gone from where the driver put them;
			// what the device left there is the guest's now.
			o := s.area - mv.old
			area := h.bytes()[o : o+s.areaLen]
			s.checkArea(area)
			copy(h.shadow[o:], area)
			s.areaLost = true
		}
	}
}

// ramFD is a file descriptor of the VM's RAM memfd, opened through the
// VMM's mapping of it (the VMM does not hand its fd out).
func (s *pvSide) ramFD() int {
	if s.ramfd > 0 {
		return s.ramfd
	}
	base := s.g.vm.Regions()[0].UserAddr
	v := pvVMAAt(pvReadVMAs(s.r.t), base)
	if v == nil || v.lo != base {
		s.r.fatalf("%s: no mapping of guest RAM at %#x", s.name, base)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/map_files/%x-%x", v.lo, v.hi), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		s.r.fatalf("%s: opening guest RAM through /proc/self/map_files: %v", s.name, err)
	}
	s.ramfd = fd
	s.r.t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// regMR registers a random MR and checks the device's answer against the
// model: refused (BAD_ADDRESS) exactly when some byte is outside guest
// RAM or in the doorbell area.
func (r *pvRun) regMR(s *pvSide) {
	if len(s.mrs) >= pvMaxMRs {
		r.deregMR(s)
		return
	}
	rng := r.rng
	var spans []emtt.Span
	var pages []uint64
	var kind string
	switch k := rng.IntN(100); {
	case k < 20 && len(s.hot) > 0:
		h := s.hot[rng.IntN(len(s.hot))]
		kind = "hot"
		switch rng.IntN(8) {
		case 0:
			kind = "hot, over its end"
			n := pvLen(rng, h.size)
			spans = []emtt.Span{{GPA: h.gpa + h.size - n/2, Len: n}}
		case 1, 2:
			pages = pvPages(rng, h.gpa, h.size)
		default:
			spans = []emtt.Span{pvSpan(rng, h.gpa, h.size)}
		}
	case k < 50 && s.areaLen > 0:
		spans, pages, kind = s.nearArea()
	case k < 56:
		kind = "outside RAM"
		gpa := pvOutside + rng.Uint64N(1<<20)
		if len(s.gone) > 0 && rng.IntN(2) == 0 {
			h := s.gone[rng.IntN(len(s.gone))]
			gpa, kind = h.gpa+rng.Uint64N(h.size/2), "removed memory"
		}
		if rng.IntN(3) == 0 {
			pages = []uint64{gpa &^ (pvPage - 1)}
		} else {
			spans = []emtt.Span{{GPA: gpa, Len: pvLen(rng, 1<<20)}}
		}
	default:
		kind = "arena"
		if rng.IntN(3) == 0 {
			pages = pvPages(rng, s.arena, pvArenaSize)
		} else {
			spans = []emtt.Span{pvSpan(rng, s.arena, pvArenaSize)}
		}
	}
	access := pvAccesses[rng.IntN(len(pvAccesses))]
	req := abi.RegMRReq{PDN: s.pdn, Access: access}
	if pages != nil {
		// A page list (4 KiB pages, the IOVA page-aligned): the last
		// page is used in part.
		req.Length = uint64(len(pages)-1)*pvPage + pvMinDMA*2 + rng.Uint64N(pvPage-pvMinDMA*2+1)
		req.IOVA = rng.Uint64N(1<<36) &^ (pvPage - 1)
		req.Addr, req.PageShift, req.NPages = s.plist, 12, uint32(len(pages))
		list := s.g.bytes(s.plist, uint64(len(pages))*8)
		left := req.Length
		for i, p := range pages {
			binary.LittleEndian.PutUint64(list[i*8:], p)
			n := min(left, pvPage)
			if k := len(spans) - 1; k >= 0 && spans[k].GPA+spans[k].Len == p {
				spans[k].Len += n
			} else {
				spans = append(spans, emtt.Span{GPA: p, Len: n})
			}
			left -= n
		}
	} else {
		req.Addr, req.Length = spans[0].GPA, spans[0].Len
		req.IOVA = spans[0].GPA
		if rng.IntN(2) == 0 {
			req.IOVA = rng.Uint64N(1 << 40)
		}
	}
	want, where := s.regExpect(spans)
	var resp abi.RegMRResp
	st := s.g.do(abi.OpRegMR, &req, &resp)
	r.logf("%s: REG_MR %s %v access %#x: %v (want %v) key %#x", s.name, kind, spans, uint32(access), st, want, resp.LKey)
	if st != want {
		r.fatalf("%s: REG_MR (%s) over %v: %v, want %v (doorbell area %#x+%#x)", s.name, kind, spans, st, want, s.area, s.areaLen)
	}
	if st == abi.StatusOK {
		s.mrs = append(s.mrs, &pvMR{key: resp.LKey, iova: req.IOVA, length: req.Length, spans: spans, access: access, hot: where, valid: true})
	}
}

// nearArea makes an MR in the 2 MiB chunks around the fallback doorbell
// area: right before it, right after it, over it (refused), or a page list
// of pages around (and sometimes in) it.
func (s *pvSide) nearArea() ([]emtt.Span, []uint64, string) {
	rng := s.r.rng
	base, size := s.arena, uint64(pvArenaSize)
	if s.areaHot != nil {
		base, size = s.areaHot.gpa, s.areaHot.size
	}
	lo := max(s.area&^(pvdma.ChunkSize-1), base)
	end := s.area + s.areaLen
	hi := min((end+pvdma.ChunkSize-1)&^(pvdma.ChunkSize-1), base+size)
	switch rng.IntN(5) {
	case 0:
		if room := s.area - lo; room >= pvMinDMA*2 {
			n := pvLen(rng, room)
			return []emtt.Span{{GPA: s.area - n, Len: n}}, nil, "ending at the doorbells"
		}
	case 1:
		if room := hi - end; room >= pvMinDMA*2 {
			n := pvLen(rng, room)
			return []emtt.Span{{GPA: end, Len: n}}, nil, "starting after the doorbells"
		}
	case 2:
		start := max(lo, s.area-rng.Uint64N(3*pvPage))
		n := s.area - start + 1 + rng.Uint64N(s.areaLen+pvPage)
		return []emtt.Span{{GPA: start, Len: n}}, nil, "over the doorbells"
	case 3:
		return nil, pvPages(rng, lo, hi-lo), "page list around the doorbells"
	}
	return []emtt.Span{pvSpan(rng, lo, hi-lo)}, nil, "in the doorbells' chunk"
}

// regExpect is REG_MR's status by the model, and the hot region the MR is
// in (nil: the arena).
func (s *pvSide) regExpect(spans []emtt.Span) (abi.Status, *pvHot) {
	var where *pvHot
	for i, sp := range spans {
		h, ok := s.memOf(sp)
		switch {
		case !ok:
			return abi.StatusBadAddress, nil
		case s.areaLen > 0 && pvOverlap(sp, emtt.Span{GPA: s.area, Len: s.areaLen}):
			return abi.StatusBadAddress, nil
		case i == 0:
			where = h
		case h != where:
			// The generator never mixes memories in one MR.
			s.r.fatalf("MR spans %v mix memories", spans)
		}
	}
	return abi.StatusOK, where
}

// memOf reports whether sp lies in the arena (nil) or in one live hot
// region.
func (s *pvSide) memOf(sp emtt.Span) (*pvHot, bool) {
	if sp.GPA+sp.Len < sp.GPA {
		return nil, false
	}
	if sp.GPA >= s.arena && sp.GPA+sp.Len <= s.arena+pvArenaSize {
		return nil, true
	}
	for _, h := range s.hot {
		if sp.GPA >= h.gpa && sp.GPA+sp.Len <= h.gpa+h.size {
			return h, true
		}
	}
	return nil, false
}

// deregMR deregisters a random MR (sometimes a stale key, refused).
func (r *pvRun) deregMR(s *pvSide) {
	if len(s.dead) > 0 && r.rng.IntN(8) == 0 {
		k := s.dead[r.rng.IntN(len(s.dead))]
		r.logf("%s: DEREG_MR stale %#x", s.name, k)
		s.g.want(abi.StatusNotFound, abi.OpDeregMR, &abi.HandleReq{Handle: k})
		return
	}
	if len(s.mrs) == 0 {
		r.regMR(s)
		return
	}
	i := r.rng.IntN(len(s.mrs))
	m := s.mrs[i]
	r.logf("%s: DEREG_MR %v", s.name, m)
	s.g.must(abi.OpDeregMR, &abi.HandleReq{Handle: m.key}, nil)
	s.mrs = slices.Delete(s.mrs, i, i+1)
	s.dead = append(s.dead, m.key)
}

// pick chooses an MR for a DMA that needs access need: mostly one that
// allows it, sometimes any (invalid, wrong access) or a stale key.
func (s *pvSide) pick(need abi.Access) *pvMR {
	rng := s.r.rng
	var ok []*pvMR
	for _, m := range s.mrs {
		if m.usable(need) {
			ok = append(ok, m)
		}
	}
	switch k := rng.IntN(100); {
	case k < 80 && len(ok) > 0:
		return ok[rng.IntN(len(ok))]
	case k < 95 && len(s.mrs) > 0:
		return s.mrs[rng.IntN(len(s.mrs))]
	case len(s.dead) > 0:
		return &pvMR{key: s.dead[rng.IntN(len(s.dead))], length: pvPage, dead: true}
	case len(s.mrs) > 0:
		return s.mrs[rng.IntN(len(s.mrs))]
	}
	return nil
}

// dma runs one RDMA operation from s's QP to its peer's and checks its
// completion status against the model, and, if it succeeded, that the
// destination holds the payload and is pinned.
func (r *pvRun) dma(s *pvSide, op pvOp) { r.dmaWith(s, op, nil, nil) }

// dmaNearDoorbells runs a DMA into or out of an MR in the 2 MiB chunks
// that hold a fallback doorbell area (the 2 MiB-vs-4 KiB case).
func (r *pvRun) dmaNearDoorbells(s *pvSide) {
	if !s.fallback {
		s = s.peer
	}
	if !s.fallback {
		r.dma(s, pvWrite)
		return
	}
	m := s.mrNearDoorbells()
	switch r.rng.IntN(3) {
	case 0:
		r.dmaWith(s.peer, pvWrite, nil, m)
	case 1:
		r.dmaWith(s.peer, pvRead, nil, m)
	default:
		r.dmaWith(s, pvRead, m, nil)
	}
}

// mrNearDoorbells returns an MR of s that shares a 2 MiB chunk with its
// doorbell area, registering one if there is none.
func (s *pvSide) mrNearDoorbells() *pvMR {
	acc := abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead
	for _, m := range s.mrs {
		if m.usable(acc) && s.touchesDoorbellChunk(m.spans) {
			return m
		}
	}
	for {
		spans, pages, _ := s.nearArea()
		if pages != nil || len(spans) != 1 {
			continue
		}
		if st, where := s.regExpect(spans); st == abi.StatusOK {
			sp := spans[0]
			var resp abi.RegMRResp
			s.g.must(abi.OpRegMR, &abi.RegMRReq{PDN: s.pdn, Access: acc, IOVA: sp.GPA, Length: sp.Len, Addr: sp.GPA}, &resp)
			m := &pvMR{key: resp.LKey, iova: sp.GPA, length: sp.Len, spans: spans, access: acc, hot: where, valid: true}
			s.mrs = append(s.mrs, m)
			return m
		}
	}
}

// dmaWith is dma with the local MR lm and the remote MR rm (nil: picked
// at random).
func (r *pvRun) dmaWith(s *pvSide, op pvOp, lm, rm *pvMR) {
	p := s.peer
	var lneed, rneed abi.Access
	switch op {
	case pvRead:
		lneed, rneed = abi.AccessLocalWrite, abi.AccessRemoteRead
	case pvWrite:
		rneed = abi.AccessRemoteWrite
	case pvSend:
		rneed = abi.AccessLocalWrite
	}
	if lm == nil {
		lm = s.pick(lneed)
	}
	if rm == nil {
		rm = p.pick(rneed)
	}
	switch {
	case lm == nil:
		r.regMR(s)
		return
	case rm == nil:
		r.regMR(p)
		return
	}
	rng := r.rng
	lo, ro := rng.Uint64N(lm.length-pvMinDMA+1), rng.Uint64N(rm.length-pvMinDMA+1)
	n := max(pvLen(rng, min(lm.length-lo, rm.length-ro, pvMaxDMA)), pvMinDMA)
	pl := pvPayload(r.step, n)
	wrid := uint64(r.step)<<4 | uint64(op)

	src, srcMR, srcOff := s, lm, lo
	dst, dstMR, dstOff := p, rm, ro
	if op == pvRead {
		src, srcMR, srcOff, dst, dstMR, dstOff = p, rm, ro, s, lm, lo
	}
	if srcMR.usable(0) {
		src.store(srcMR.at(srcOff, n), pl)
	}
	lok, rok := lm.usable(lneed), rm.usable(rneed)
	if s.replaced(lm) || p.replaced(rm) {
		r.stale++
	}
	want, wantRecv := abi.WCSuccess, abi.WCSuccess
	switch {
	case !lok:
		want = abi.WCLocProtErr
	case !rok && op == pvSend:
		want, wantRecv = abi.WCRemOpErr, abi.WCLocProtErr
	case !rok:
		want = abi.WCRemAccessErr
	}
	r.logf("%s: %v %#x bytes from %v+%#x to %v+%#x, want %v", s.name, op, n, lm, lo, rm, ro, want)

	if op == pvSend {
		p.postRecv(wrid, abi.SGE{Addr: rm.iova + ro, Length: uint32(n), LKey: rm.key})
	}
	w := abi.SendWQE{WRID: wrid, Flags: abi.SendSignaled, NumSGE: 1, RemoteAddr: rm.iova + ro, RKey: rm.key}
	switch op {
	case pvWrite:
		w.Opcode = abi.WRRDMAWrite
	case pvRead:
		w.Opcode = abi.WRRDMARead
	case pvSend:
		w.Opcode, w.RemoteAddr, w.RKey = abi.WRSend, 0, 0
	}
	s.postSend(w, abi.SGE{Addr: lm.iova + lo, Length: uint32(n), LKey: lm.key})
	c := s.waitCQE(wrid)
	if c.Status != want {
		r.fatalf("%s: %v from %v to %v: status %v, want %v", s.name, op, lm, rm, c.Status, want)
	}
	if op == pvSend && lok {
		rc := p.waitCQE(wrid)
		if rc.Status != wantRecv || (rc.Status == abi.WCSuccess && uint64(rc.ByteLen) != n) {
			r.fatalf("%s: receive into %v: %+v, want status %v, %d bytes", p.name, rm, rc, wantRecv, n)
		}
	}
	if want != abi.WCSuccess {
		r.relink(s, p)
		return
	}
	spans := dstMR.at(dstOff, n)
	dst.expectDMA(spans, pl)
	for _, side := range []*pvSide{src, dst} {
		sp := srcMR.at(srcOff, n)
		if side == dst {
			sp = spans
		}
		side.pinnedNow = append(side.pinnedNow, sp...)
		if side.touchesDoorbellChunk(sp) {
			side.nearDoorbells++
		}
	}
}

// replaced reports whether m's memory was removed (or moved) and other
// memory is plugged in where it was now.
func (s *pvSide) replaced(m *pvMR) bool {
	if m.dead || m.valid || m.hot == nil {
		return false
	}
	_, live := s.memOf(emtt.Span{GPA: m.spans[0].GPA, Len: 1})
	return live
}

// store writes b into the guest memory behind spans and the model.
func (s *pvSide) store(spans []emtt.Span, b []byte) {
	for _, sp := range spans {
		mem, sh := s.where(sp)
		copy(mem, b[:sp.Len])
		copy(sh, b[:sp.Len])
		b = b[sp.Len:]
	}
}

// expectDMA checks that a DMA wrote b into spans and updates the model.
func (s *pvSide) expectDMA(spans []emtt.Span, b []byte) {
	for _, sp := range spans {
		mem, sh := s.where(sp)
		if i := pvFirstDiff(mem, b[:sp.Len]); i >= 0 {
			s.r.fatalf("%s: DMA destination %#x+%#x: byte %#x is %#x, want %#x", s.name, sp.GPA, sp.Len, i, mem[i], b[i])
		}
		copy(sh, b[:sp.Len])
		b = b[sp.Len:]
	}
}

// where returns the test's bytes of sp (in the arena or a live hot region)
// and the model's.
func (s *pvSide) where(sp emtt.Span) (mem, shadow []byte) {
	h, ok := s.memOf(sp)
	switch {
	case !ok:
		s.r.fatalf("%s: %v is not test memory", s.name, sp)
	case h == nil:
		o := sp.GPA - s.arena
		return s.g.bytes(sp.GPA, sp.Len), s.shadow[o : o+sp.Len]
	}
	o := sp.GPA - h.gpa
	return h.bytes()[o : o+sp.Len], h.shadow[o : o+sp.Len]
}

// view is the guest's view of test memory (for atomic accesses).
func (s *pvSide) view(gpa, n uint64) guestmem.View {
	h, ok := s.memOf(emtt.Span{GPA: gpa, Len: n})
	var v guestmem.View
	var err error
	switch {
	case !ok:
		s.r.fatalf("%s: %#x+%#x is not test memory", s.name, gpa, n)
	case h == nil:
		v, err = s.g.vm.Memory().Translate(gpa, n)
	default:
		v, err = h.m.View().Sub(gpa-h.gpa, n)
	}
	if err != nil {
		s.r.fatalf("%s: %#x+%#x: %v", s.name, gpa, n, err)
	}
	return v
}

// record is the guest's view of doorbell record i.
func (s *pvSide) record(i uint32) guestmem.View {
	off, ok := s.d.DoorbellLayout().RecordOffset(i)
	if !ok {
		s.r.fatalf("no doorbell record %d", i)
	}
	var v guestmem.View
	var err error
	if s.fallback {
		v = s.view(s.area+off, abi.DoorbellRecordSize)
	} else {
		v, err = s.g.vm.ShmemMapped(abi.DoorbellShmID, off, abi.DoorbellRecordSize)
	}
	if err != nil {
		s.r.fatalf("%s: doorbell record %d: %v", s.name, i, err)
	}
	return v
}

func (s *pvSide) postSend(w abi.SendWQE, sge abi.SGE) {
	stride := uint64(s.qp.SQStride)
	slot := s.g.bytes(s.qpReq.SQAddr+uint64(s.sqProd%s.qpReq.SQSize)*stride, stride)
	clear(slot)
	w.Put(slot)
	sge.Put(slot[abi.SendWQEHeaderSize:])
	s.sqProd++
	s.record(s.qp.DoorbellIndex).StoreUint32Release(abi.QPDoorbellOffSQProd, s.sqProd)
	// Always kick: cheaper to reason about than reading EngineIdle.
	if err := s.g.vm.Kick(abi.QueueWakeup); err != nil {
		s.r.fatalf("%s: kick: %v", s.name, err)
	}
}

func (s *pvSide) postRecv(wrid uint64, sge abi.SGE) {
	stride := uint64(s.qp.RQStride)
	slot := s.g.bytes(s.qpReq.RQAddr+uint64(s.rqProd%s.qpReq.RQSize)*stride, stride)
	clear(slot)
	abi.RecvWQE{WRID: wrid, NumSGE: 1}.Put(slot)
	sge.Put(slot[abi.RecvWQEHeaderSize:])
	s.rqProd++
	s.record(s.qp.DoorbellIndex).StoreUint32Release(abi.QPDoorbellOffRQProd, s.rqProd)
}

// waitCQE consumes completions until the one for wrid (flushes of other
// work requests are skipped; anything else is a failure).
func (s *pvSide) waitCQE(wrid uint64) abi.CQE {
	deadline := time.Now().Add(10 * time.Second)
	for spins := 0; ; spins++ {
		rec := s.record(s.cq.DoorbellIndex)
		for int32(rec.LoadUint32Acquire(abi.CQDoorbellOffProd)-s.cqCons) > 0 {
			c := abi.DecodeCQE(s.g.bytes(s.cqRing+uint64(s.cqCons%pvCQEntries)*abi.CQESize, abi.CQESize))
			s.cqCons++
			rec.StoreUint32Release(abi.CQDoorbellOffCons, s.cqCons)
			if c.WRID == wrid {
				return c
			}
			if c.Status != abi.WCWRFlushErr {
				s.r.fatalf("%s: unexpected completion %+v while waiting for wr %#x", s.name, c, wrid)
			}
		}
		if time.Now().After(deadline) {
			s.r.fatalf("%s: no completion for wr %#x", s.name, wrid)
		}
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// hotAdd plugs a fresh memfd in at a new guest physical address or, half
// the time, where a removed one was (its MRs must stay invalid).
func (r *pvRun) hotAdd(s *pvSide) {
	switch {
	case len(s.hot) >= pvMaxHot:
		r.hotRemove(s)
		return
	case s.adds >= r.maxAdds:
		r.regMR(s)
		return
	}
	rng := r.rng
	size := uint64(1+rng.IntN(2))<<20 + uint64(rng.IntN(64))*pvPage
	busy := func(slot uint64) bool {
		for _, h := range s.hot {
			if (h.gpa-pvHotBase)/pvHotStride == slot {
				return true
			}
		}
		return false
	}
	var gpa uint64
	var reuse []*pvHot
	for _, h := range s.gone {
		if !busy((h.gpa - pvHotBase) / pvHotStride) {
			reuse = append(reuse, h)
		}
	}
	if len(reuse) > 0 && rng.IntN(2) == 0 {
		gpa = reuse[rng.IntN(len(reuse))].gpa
	} else {
		for {
			if slot := rng.Uint64N(pvHotSlots); !busy(slot) {
				gpa = pvHotBase + slot*pvHotStride + rng.Uint64N(512)*pvPage
				break
			}
		}
	}
	fd, err := unix.MemfdCreate(fmt.Sprintf("pvdma-hot-%s-%d", s.name, s.adds), unix.MFD_CLOEXEC)
	if err != nil {
		r.fatalf("memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		r.fatalf("ftruncate: %v", err)
	}
	m, err := guestmem.MapOwn(fd, 0, size)
	if err != nil {
		unix.Close(fd)
		r.fatalf("map: %v", err)
	}
	h := &pvHot{gpa: gpa, size: size, fd: fd, m: m, shadow: pvNoise(rng, size)}
	copy(h.bytes(), h.shadow)
	h.region = frontend.MemRegion{GuestPhys: gpa, Size: size, UserAddr: m.Addr()}
	s.hot = append(s.hot, h) // the side's cleanup closes it from here on
	s.adds++
	r.logf("%s: ADD_MEM_REG %#x+%#x", s.name, gpa, size)
	if err := s.g.vm.Frontend().AddMemReg(s.g.ctx, h.region, fd); err != nil {
		r.fatalf("%s: ADD_MEM_REG %#x+%#x: %v", s.name, gpa, size, err)
	}
	// An MR of memory that was here before reaches nothing now, as the
	// remote or the local side of a DMA.
	for _, m := range s.mrs {
		if s.replaced(m) {
			r.dmaWith(s.peer, pvWrite, nil, m)
			r.dmaWith(s, pvWrite, m, nil)
			break
		}
	}
}

// hotRemove unplugs a hot-added region: its MRs go invalid, its pins go
// and its bytes must never change again.
func (r *pvRun) hotRemove(s *pvSide) {
	if len(s.hot) == 0 {
		r.hotAdd(s) // which never comes back here with none
		return
	}
	h := s.hot[r.rng.IntN(len(s.hot))]
	area := s.areaOf(h.gpa)
	r.logf("%s: REM_MEM_REG %#x+%#x", s.name, h.gpa, h.size)
	if err := s.g.vm.Frontend().RemMemReg(s.g.ctx, h.region); err != nil {
		r.fatalf("%s: REM_MEM_REG %#x: %v", s.name, h.gpa, err)
	}
	s.retire(h, nil)
	if area == nil || !area.Gone() {
		r.fatalf("%s: pin cache area of the removed region %#x: found %v, gone %v", s.name, h.gpa, area != nil, area != nil && area.Gone())
	}
}

// racingRemove posts an RDMA WRITE between the two sides and, at once,
// takes away the hot-added region of side o that holds its destination
// (o is the responder) or its source (o is the requester): REM_MEM_REG,
// SET_MEM_TABLE without it, or a disconnect (which sends the memory table
// without any hot-added region; a guest's device reset would too, but it
// drops every object, which racingControl's RESET_STATE race covers).
// Either the
// WRITE finished before the removal (success, its bytes in place when the
// removal returns) or it fails and moved nothing; after the removal
// returns nothing changes the removed memfd.
func (r *pvRun) racingRemove(o *pvSide) {
	rng := r.rng
	var cands []*pvHot
	for _, h := range o.hot {
		if h != o.areaHot { // removing that one stops o's engine
			cands = append(cands, h)
		}
	}
	if len(cands) == 0 {
		r.hotAdd(o)
		return
	}
	h := cands[rng.IntN(len(cands))]
	how := [...]string{"REM_MEM_REG", "SET_MEM_TABLE", "reconnect"}[rng.IntN(3)]
	if r.live {
		how = [...]string{"REM_MEM_REG", "SET_MEM_TABLE"}[rng.IntN(2)]
	}
	if o.areaHot != nil && how != "REM_MEM_REG" && how != "SET_MEM_TABLE" {
		how = "REM_MEM_REG" // the doorbells would go too, and with them the WRITE's QP
	}
	src, dst := o.peer, o
	if rng.IntN(2) == 0 {
		src, dst = o, o.peer
	}
	in := func(side *pvSide) *pvHot {
		if side == o {
			return h
		}
		return nil
	}
	srcMR := src.mrIn(in(src), 0)
	dstMR := dst.mrIn(in(dst), abi.AccessRemoteWrite)
	remove := func() {
		ctx, vm := o.g.ctx, o.g.vm
		var err error
		switch how {
		case "REM_MEM_REG":
			err = vm.Frontend().RemMemReg(ctx, h.region)
		case "SET_MEM_TABLE":
			regs, fds := vm.Regions(), []int{o.ramFD()}
			for _, x := range o.hot {
				if x != h {
					regs, fds = append(regs, x.region), append(fds, x.fd)
				}
			}
			err = vm.Frontend().SetMemTable(ctx, regs, fds)
		case "reconnect":
			err = vm.Reconnect(ctx)
		}
		if err != nil {
			r.fatalf("%s: %s: %v", o.name, how, err)
		}
		if how == "reconnect" {
			wait.For(r.t, "re-activation", o.d.active.Load)
		}
	}
	var c abi.CQE
	exp := r.racingWrite(src, srcMR, dst, dstMR, fmt.Sprintf("%s's %s of %#x", o.name, how, h.gpa), remove, h, &c)
	switch st := c.Status; {
	case st == abi.WCSuccess:
	case dst == o && (st == abi.WCRemAccessErr || st == abi.WCRemOpErr || st == abi.WCRetryExcErr),
		src == o && st == abi.WCLocProtErr:
	default:
		r.fatalf("%s: WRITE racing the removal: %v", src.name, st)
	}
	o.retire(h, exp)
	if how == "reconnect" {
		o.memoryReplaced() // the other hot regions went too
	}
	if c.Status != abi.WCSuccess {
		r.relink(src, dst)
	}
}

// racingControl posts an RDMA WRITE into an MR of s and, at once,
// deregisters the MR or resets s (RESET_STATE): the WRITE lands whole or
// not at all.
func (r *pvRun) racingControl(s *pvSide) {
	p, rng := s.peer, r.rng
	dstMR := s.pick(abi.AccessRemoteWrite)
	if dstMR == nil || !dstMR.usable(abi.AccessRemoteWrite) {
		r.regMR(s)
		return
	}
	srcMR := p.mrIn(nil, 0)
	reset := rng.IntN(4) == 0
	what := "DEREG_MR"
	if reset {
		what = "RESET_STATE"
	}
	var c abi.CQE
	r.racingWrite(p, srcMR, s, dstMR, s.name+"'s "+what, func() {
		if reset {
			s.g.must(abi.OpResetState, nil, nil)
			return
		}
		s.g.must(abi.OpDeregMR, &abi.HandleReq{Handle: dstMR.key}, nil)
	}, nil, &c)
	switch st := c.Status; {
	case st == abi.WCSuccess, st == abi.WCRemAccessErr, reset && st == abi.WCRetryExcErr:
	default:
		r.fatalf("%s: WRITE racing %s: %v", p.name, what, st)
	}
	if reset {
		s.dropObjects()
		s.build()
		r.relink(p)
	} else {
		s.mrs = slices.DeleteFunc(s.mrs, func(m *pvMR) bool { return m == dstMR })
		s.dead = append(s.dead, dstMR.key)
	}
	if c.Status != abi.WCSuccess {
		r.relink(s, p)
	}
}

// racingWrite posts a burst of large RDMA WRITEs of one payload from
// srcMR (of src) to places in dstMR (of dst), runs op a moment later and
// waits for the WRITEs' completions: a run of successes, then (if op
// won) the first failure, returned in c, and flushes. The destination
// must then hold what the successful WRITEs wrote, in order, and
// nothing of the others. If dstMR is in h, that is checked on the bytes
// h held when op returned, which are returned (the model's view of h
// from then on); otherwise the destination is checked and the model
// updated.
func (r *pvRun) racingWrite(src *pvSide, srcMR *pvMR, dst *pvSide, dstMR *pvMR, what string, op func(), h *pvHot, c *abi.CQE) []byte {
	rng := r.rng
	so := rng.Uint64N(srcMR.length - pvMinDMA + 1)
	// Large, so that the copies take a while.
	n := max(min(64<<10+rng.Uint64N(pvMaxDMA), srcMR.length-so, dstMR.length), pvMinDMA)
	pl := pvPayload(r.step, n)
	src.store(srcMR.at(so, n), pl)
	dos := make([]uint64, 1+rng.IntN(int(src.qpReq.SQSize)))
	for i := range dos {
		dos[i] = rng.Uint64N(dstMR.length - n + 1)
		wrid := uint64(r.step)<<4 | uint64(i)
		src.postSend(abi.SendWQE{WRID: wrid, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, NumSGE: 1, RemoteAddr: dstMR.iova + dos[i], RKey: dstMR.key},
			abi.SGE{Addr: srcMR.iova + so, Length: uint32(n), LKey: srcMR.key})
	}
	r.logf("%s: %d WRITEs of %#x bytes from %v+%#x to %v+%#x racing %s", src.name, len(dos), n, srcMR, so, dstMR, dos, what)
	if d := rng.IntN(400); d >= 100 {
		time.Sleep(time.Duration(d-100) * time.Microsecond)
	}
	op()
	var snap []byte
	if h != nil {
		snap = bytes.Clone(h.bytes())
	}
	var landed []uint64 // destination offsets of the WRITEs that succeeded
	*c = abi.CQE{}
	for i := range dos {
		ci := src.waitCQE(uint64(r.step)<<4 | uint64(i))
		switch {
		case ci.Status == abi.WCSuccess && c.Status == abi.WCSuccess:
			landed = append(landed, dos[i])
		case c.Status == abi.WCSuccess:
			*c = ci // the first failure
		case ci.Status != abi.WCWRFlushErr:
			r.fatalf("%s: WRITE %d after a failed one: %v", src.name, i, ci.Status)
		}
	}
	r.raced[min(len(dos)-len(landed), 1)]++
	r.logf("%s: raced WRITEs: %d landed, then %v", src.name, len(landed), c.Status)
	if h == nil || dstMR.hot != h {
		for i, do := range landed {
			if i == len(landed)-1 {
				// The last one is there whole.
				dst.expectDMA(dstMR.at(do, n), pl)
				break
			}
			b := pl
			for _, sp := range dstMR.at(do, n) {
				_, sh := dst.where(sp)
				copy(sh, b[:sp.Len])
				b = b[sp.Len:]
			}
		}
		if h == nil {
			return nil
		}
		// The region taken away held the source: it must not have
		// changed.
		if i := pvFirstDiff(snap, h.shadow); i >= 0 {
			r.fatalf("%s: removed region %#x when %s returned: byte %#x is %#x, want %#x", src.name, h.gpa, what, i, snap[i], h.shadow[i])
		}
		return bytes.Clone(h.shadow)
	}
	exp := bytes.Clone(h.shadow)
	for _, do := range landed {
		b := pl
		for _, sp := range dstMR.at(do, n) {
			copy(exp[sp.GPA-h.gpa:], b[:sp.Len])
			b = b[sp.Len:]
		}
	}
	if i := pvFirstDiff(snap, exp); i >= 0 {
		r.fatalf("%s: removed region %#x when %s returned (%d WRITEs landed, then %v): byte %#x is %#x, want %#x",
			dst.name, h.gpa, what, len(landed), c.Status, i, snap[i], exp[i])
	}
	return exp
}

// mrIn returns a usable MR (for access need) in hot region h, or in the
// arena if h is nil, registering one if there is none.
func (s *pvSide) mrIn(h *pvHot, need abi.Access) *pvMR {
	for _, m := range s.mrs {
		if m.hot == h && m.usable(need) {
			return m
		}
	}
	base, size := s.arena, uint64(pvArenaSize)
	if h != nil {
		base, size = h.gpa, h.size
	}
	sp := pvSpan(s.r.rng, base, size)
	for s.areaLen > 0 && pvOverlap(sp, emtt.Span{GPA: s.area, Len: s.areaLen}) {
		sp = pvSpan(s.r.rng, base, size)
	}
	acc := abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead
	var resp abi.RegMRResp
	s.g.must(abi.OpRegMR, &abi.RegMRReq{PDN: s.pdn, Access: acc, IOVA: sp.GPA, Length: sp.Len, Addr: sp.GPA}, &resp)
	m := &pvMR{key: resp.LKey, iova: sp.GPA, length: sp.Len, spans: []emtt.Span{sp}, access: acc, hot: h, valid: true}
	s.mrs = append(s.mrs, m)
	return m
}

// checkAll checks the invariants after a step.
func (r *pvRun) checkAll() {
	vmas := pvReadVMAs(r.t)
	var sum uint64
	for _, s := range r.sides {
		s.checkMemory()
		s.checkPins(vmas)
		s.checkPinned(vmas, s.pinnedNow)
		s.pinnedNow = s.pinnedNow[:0]
		sum += s.d.pins.Stats().PinnedBytes
	}
	if got := r.pool.Stats().PinnedBytes; got != sum {
		r.fatalf("pool reports %#x bytes pinned, its caches %#x", got, sum)
	}
	if held, bad := r.pinner.state(); held != sum || bad != "" {
		r.fatalf("pinner holds %#x bytes (caches report %#x); errors: %s", held, sum, bad)
	}
}

// checkMemory checks that no doorbell byte holds payload and that all test
// memory holds what the model says.
func (s *pvSide) checkMemory() {
	r := s.r
	magic := []byte(pvMagic[:4])
	if s.fallback {
		if s.areaLen > 0 {
			s.checkArea(s.view(s.area, s.areaLen).Bytes())
		}
	} else if i := bytes.Index(s.d.DoorbellRegion().View().Bytes(), magic); i >= 0 {
		r.fatalf("%s: DMA payload in the doorbell region at offset %#x", s.name, i)
	}
	// Test memory, but for the doorbell area (the device's records).
	check := func(base uint64, mem, shadow []byte) {
		n := uint64(len(mem))
		lo, hi := n, n
		if s.areaLen > 0 && s.area >= base && s.area < base+n {
			lo, hi = s.area-base, s.area-base+s.areaLen
		}
		for _, rg := range [][2]uint64{{0, lo}, {hi, n}} {
			if i := pvFirstDiff(mem[rg[0]:rg[1]], shadow[rg[0]:rg[1]]); i >= 0 {
				o := rg[0] + uint64(i)
				r.fatalf("%s: guest physical %#x is %#x, want %#x (payload: %v)", s.name, base+o, mem[o], shadow[o],
					bytes.Contains(mem[o&^15:min(o&^15+32, n)], magic))
			}
		}
	}
	check(s.arena, s.g.bytes(s.arena, pvArenaSize), s.shadow)
	for _, h := range s.hot {
		check(h.gpa, h.bytes(), h.shadow)
	}
	for _, h := range s.gone {
		if i := pvFirstDiff(h.bytes(), h.shadow); i >= 0 {
			r.fatalf("%s: REMOVED region %#x changed: byte %#x is %#x, was %#x", s.name, h.gpa, i, h.bytes()[i], h.shadow[i])
		}
	}
	if r.keepGone > 0 {
		s.gone = slices.DeleteFunc(s.gone, func(h *pvHot) bool {
			if r.step-h.goneAt < r.keepGone {
				return false
			}
			h.m.Unmap()
			unix.Close(h.fd)
			return true
		})
	}
	if o := s.d.Objects(); o.MRs != len(s.mrs) {
		r.fatalf("%s: device has %d MRs, model %d", s.name, o.MRs, len(s.mrs))
	}
}

// checkArea checks the bytes of the fallback doorbell area: the
// doorbells (which the device cleared at SET_DOORBELL_AREA) hold no
// payload, and the rest of the area, IO memory that nothing may write,
// is as it was then.
func (s *pvSide) checkArea(b []byte) {
	n := s.d.DoorbellLayout().Size()
	if i := bytes.Index(b[:n], []byte(pvMagic[:4])); i >= 0 {
		s.r.fatalf("%s: DMA payload in the doorbell area at %#x", s.name, s.area+uint64(i))
	}
	if i := pvFirstDiff(b[n:], s.areaTail); i >= 0 {
		s.r.fatalf("%s: doorbell area byte %#x changed: %#x, was %#x", s.name, s.area+n+uint64(i), b[n+uint64(i)], s.areaTail[i])
	}
}

// devRegions is the device's guest memory table.
func (s *pvSide) devRegions() []guestmem.Region {
	s.d.omu.Lock()
	defer s.d.omu.Unlock()
	if s.d.mem == nil {
		return nil
	}
	return s.d.mem.Regions()
}

// areaOf is the pin cache's area for the device's region holding gpa.
func (s *pvSide) areaOf(gpa uint64) *pvdma.Area {
	for _, reg := range s.devRegions() {
		if reg.GuestPhys <= gpa && gpa-reg.GuestPhys < reg.Size {
			return s.d.pins.AreaOf(reg)
		}
	}
	return nil
}

// hostRange is the daemon's address range of guest physical [gpa, +n).
func (s *pvSide) hostRange(gpa, n uint64) (uint64, uint64, bool) {
	for _, reg := range s.devRegions() {
		if reg.GuestPhys <= gpa && gpa+n <= reg.GuestPhys+reg.Size {
			lo := reg.Mapping.Addr() + gpa - reg.GuestPhys
			return lo, lo + n, true
		}
	}
	return 0, 0, false
}

// checkPins checks the device's memory table against the model, that the
// cache's areas are exactly its regions and that what the kernel has
// locked in the daemon's mappings is what the cache reports, none of it
// doorbells.
func (s *pvSide) checkPins(vmas []pvVMA) {
	r := s.r
	regs := s.devRegions()
	want := map[[2]uint64]bool{{0, 64 << 20}: true}
	for _, h := range s.hot {
		want[[2]uint64{h.gpa, h.size}] = true
	}
	var locked uint64
	for _, reg := range regs {
		if !want[[2]uint64{reg.GuestPhys, reg.Size}] {
			r.fatalf("%s: device memory has region %v the model does not (model %v)", s.name, reg, want)
		}
		delete(want, [2]uint64{reg.GuestPhys, reg.Size})
		if a := s.d.pins.AreaOf(reg); a == nil || a.Gone() {
			r.fatalf("%s: region %v has no live pin cache area", s.name, reg)
		}
		lo := reg.Mapping.Addr()
		if v := pvVMAAt(vmas, lo); v == nil || strings.Contains(v.path, "-doorbells") {
			r.fatalf("%s: guest memory region %v is mapped from %v", s.name, reg, v)
		}
		locked += pvLockedIn(vmas, lo, lo+reg.Size)
	}
	if len(want) > 0 {
		r.fatalf("%s: device memory lacks regions %v", s.name, want)
	}
	if st := s.d.pins.Stats(); st.PinnedBytes != locked {
		r.fatalf("%s: cache reports %#x bytes pinned, the kernel has %#x locked in the device's mappings", s.name, st.PinnedBytes, locked)
	}
	s.checkPinsClearOfDoorbells(vmas)
}

// checkPinsClearOfDoorbells checks that no doorbell page is locked or in a
// live pin.
func (s *pvSide) checkPinsClearOfDoorbells(vmas []pvVMA) {
	r := s.r
	if !s.fallback {
		name := "memfd:vstellar:" + s.name + "-doorbells"
		found := false
		for _, v := range vmas {
			if strings.Contains(v.path, name) {
				found = true
				if v.locked || r.pinner.overlaps(v.lo, v.hi) {
					r.fatalf("%s: doorbell region mapping %#x-%#x is pinned", s.name, v.lo, v.hi)
				}
			}
		}
		if !found {
			r.fatalf("%s: no mapping of %s", s.name, name)
		}
		return
	}
	if s.areaLen == 0 {
		return
	}
	lo, hi, ok := s.hostRange(s.area, s.areaLen)
	if !ok {
		r.fatalf("%s: doorbell area %#x+%#x not in the device's memory", s.name, s.area, s.areaLen)
	}
	if n := pvLockedIn(vmas, lo, hi); n != 0 || r.pinner.overlaps(lo, hi) {
		r.fatalf("%s: doorbell area %#x+%#x is pinned (%#x bytes locked)", s.name, s.area, s.areaLen, n)
	}
}

// checkPinned checks that the memory behind spans (a successful DMA's) is
// pinned: the cache says so, and the kernel has every page of it locked.
func (s *pvSide) checkPinned(vmas []pvVMA, spans []emtt.Span) {
	for _, sp := range spans {
		a := s.areaOf(sp.GPA)
		if a == nil || !a.Pinned(sp.GPA, sp.Len) {
			s.r.fatalf("%s: %#x+%#x not pinned after a DMA", s.name, sp.GPA, sp.Len)
		}
		lo, hi, ok := s.hostRange(sp.GPA, sp.Len)
		lo, hi = lo&^(pvPage-1), (hi+pvPage-1)&^(pvPage-1)
		if n := pvLockedIn(vmas, lo, hi); !ok || n != hi-lo {
			s.r.fatalf("%s: %#x+%#x: %#x of %#x bytes locked after a DMA", s.name, sp.GPA, sp.Len, n, hi-lo)
		}
	}
}

// touchesDoorbellChunk reports whether spans share a 2 MiB chunk with the
// fallback doorbell area.
func (s *pvSide) touchesDoorbellChunk(spans []emtt.Span) bool {
	if s.areaLen == 0 {
		return false
	}
	lo := s.area &^ (pvdma.ChunkSize - 1)
	hi := (s.area + s.areaLen + pvdma.ChunkSize - 1) &^ (pvdma.ChunkSize - 1)
	for _, sp := range spans {
		if pvOverlap(sp, emtt.Span{GPA: lo, Len: hi - lo}) {
			return true
		}
	}
	return false
}

// finish closes both devices: nothing stays pinned.
func (r *pvRun) finish() {
	t := r.t
	type hostSpan struct{ lo, hi uint64 }
	var maps []hostSpan
	for _, s := range r.sides {
		for _, reg := range s.devRegions() {
			maps = append(maps, hostSpan{reg.Mapping.Addr(), reg.Mapping.Addr() + reg.Size})
		}
		if s.fallback && s.nearDoorbells == 0 {
			t.Errorf("%s: no successful DMA shared a 2 MiB chunk with the doorbell area", s.name)
		}
	}
	for _, s := range r.sides {
		if err := s.d.Close(); err != nil {
			t.Fatal(err)
		}
		if n := s.d.pins.Stats().PinnedBytes; n != 0 {
			t.Errorf("%s: %#x bytes pinned after Close", s.name, n)
		}
	}
	if n := r.pool.Stats().PinnedBytes; n != 0 {
		t.Errorf("pool: %#x bytes pinned after both devices closed", n)
	}
	vmas := pvReadVMAs(t)
	for _, m := range maps {
		if n := pvLockedIn(vmas, m.lo, m.hi); n != 0 {
			t.Errorf("%#x bytes still locked in %#x-%#x after Close", n, m.lo, m.hi)
		}
	}
	if held, bad := r.pinner.state(); held != 0 || bad != "" {
		t.Errorf("pinner holds %#x bytes after Close; errors: %s", held, bad)
	}
	st := r.pool.Stats()
	t.Logf("pool: %d pins, %d unpins, %d evictions, %d hits, %d misses, %d failures", st.Pins, st.Unpins, st.Evictions, st.Hits, st.Misses, st.PinFailures)
	var near []int
	for _, s := range r.sides {
		near = append(near, s.nearDoorbells)
	}
	t.Logf("%d steps; DMAs sharing a chunk with the doorbells %v; racing WRITE bursts: all landed %d, cut short %d; "+
		"DMAs through MRs of replaced memory %d; doorbell areas in hot-added memory %d (removed %d)",
		r.step-1, near, r.raced[0], r.raced[1], r.stale, r.areasInHot, r.areasLost)
}

// pvPinner is the real MlockPinner with bookkeeping: it records the host
// ranges pinned, and reports ranges pinned twice, unpins of ranges not
// pinned and errors (an unpin after the memory was unmapped fails with
// ENOMEM), which the cache would only log.
type pvPinner struct {
	mu   sync.Mutex
	live map[uintptr]int
	held uint64
	bad  []string
}

func (p *pvPinner) Pin(gpa uint64, host []byte) error {
	err := pvdma.MlockPinner{}.Pin(gpa, host)
	lo := reflect.ValueOf(host).Pointer()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.bad = append(p.bad, err.Error())
		return err
	}
	for a, n := range p.live {
		if lo < a+uintptr(n) && a < lo+uintptr(len(host)) {
			p.bad = append(p.bad, fmt.Sprintf("guest physical %#x (+%#x) pinned while %#x+%#x is", gpa, len(host), a, n))
		}
	}
	p.live[lo] = len(host)
	p.held += uint64(len(host))
	return nil
}

func (p *pvPinner) Unpin(gpa uint64, host []byte) error {
	err := pvdma.MlockPinner{}.Unpin(gpa, host)
	lo := reflect.ValueOf(host).Pointer()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.bad = append(p.bad, err.Error())
	}
	if n, ok := p.live[lo]; !ok || n != len(host) {
		p.bad = append(p.bad, fmt.Sprintf("unpin of guest physical %#x (+%#x), which is not pinned", gpa, len(host)))
		return err
	}
	delete(p.live, lo)
	p.held -= uint64(len(host))
	return err
}

// state is the bytes pinned now and the problems seen so far.
func (p *pvPinner) state() (uint64, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held, strings.Join(p.bad, "; ")
}

// overlaps reports whether a live pin overlaps host [lo, hi).
func (p *pvPinner) overlaps(lo, hi uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, n := range p.live {
		if uint64(a) < hi && lo < uint64(a)+uint64(n) {
			return true
		}
	}
	return false
}

// pvVMA is one mapping of the process as /proc/self/smaps shows it.
type pvVMA struct {
	lo, hi uint64
	path   string
	locked bool // VM_LOCKED: mlocked
}

func pvReadVMAs(t testing.TB) []pvVMA {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var out []pvVMA
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		if c := line[0]; c >= 'A' && c <= 'Z' {
			// A field of the mapping above.
			if f, ok := strings.CutPrefix(line, "VmFlags:"); ok && len(out) > 0 {
				out[len(out)-1].locked = slices.Contains(strings.Fields(f), "lo")
			}
			continue
		}
		f := strings.Fields(line)
		a, z, ok := strings.Cut(f[0], "-")
		lo, err1 := strconv.ParseUint(a, 16, 64)
		hi, err2 := strconv.ParseUint(z, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("smaps line %q", line)
		}
		v := pvVMA{lo: lo, hi: hi}
		if len(f) > 5 {
			v.path = strings.Join(f[5:], " ")
		}
		out = append(out, v)
	}
	return out
}

// pvLockedIn is the number of locked bytes in [lo, hi).
func pvLockedIn(vmas []pvVMA, lo, hi uint64) uint64 {
	var n uint64
	for _, v := range vmas {
		if v.locked && v.lo < hi && lo < v.hi {
			n += min(v.hi, hi) - max(v.lo, lo)
		}
	}
	return n
}

// pvVMAAt is the mapping holding addr.
func pvVMAAt(vmas []pvVMA, addr uint64) *pvVMA {
	for i := range vmas {
		if vmas[i].lo <= addr && addr < vmas[i].hi {
			return &vmas[i]
		}
	}
	return nil
}

// pvPayload is n bytes of payload for a step: 16-byte units of the magic,
// the step and the unit's index.
func pvPayload(step int, n uint64) []byte {
	b := make([]byte, n+16)
	for i := uint64(0); i < n; i += 16 {
		copy(b[i:], pvMagic)
		binary.LittleEndian.PutUint32(b[i+8:], uint32(step))
		binary.LittleEndian.PutUint32(b[i+12:], uint32(i/16))
	}
	return b[:n]
}

// pvNoise is n bytes (a multiple of 8) without the high bit, so never the
// magic.
func pvNoise(rng *rand.Rand, n uint64) []byte {
	b := make([]byte, n)
	for i := uint64(0); i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64()&0x7f7f7f7f7f7f7f7f)
	}
	return b
}

// pvLen is a random length up to limit, mostly small, sometimes spanning
// several 2 MiB chunks.
func pvLen(rng *rand.Rand, limit uint64) uint64 {
	var n uint64
	switch k := rng.IntN(20); {
	case k < 3:
		n = 512<<10 + rng.Uint64N(5<<19)
	case k < 8:
		n = 16<<10 + rng.Uint64N(496<<10)
	default:
		n = pvMinDMA*2 + rng.Uint64N(16<<10)
	}
	return min(n, limit)
}

// pvSpan is a random span inside [base, base+size), at any byte.
func pvSpan(rng *rand.Rand, base, size uint64) emtt.Span {
	n := max(pvLen(rng, size), min(pvMinDMA*2, size))
	return emtt.Span{GPA: base + rng.Uint64N(size-n+1), Len: n}
}

// pvPages is a random page list inside [base, base+size) (base
// page-aligned): runs of consecutive pages and jumps, all in one 2 MiB
// chunk (so a DMA holds at most two chunks, which the budgets rely on).
func pvPages(rng *rand.Rand, base, size uint64) []uint64 {
	first := base / pvdma.ChunkSize
	c := (first + rng.Uint64N((base+size-1)/pvdma.ChunkSize-first+1)) * pvdma.ChunkSize
	base, size = max(c, base), min(c+pvdma.ChunkSize, base+size)-max(c, base)
	pages := make([]uint64, 1+rng.IntN(pvMaxPages))
	for i := range pages {
		if i > 0 && rng.IntN(2) == 0 && pages[i-1]+pvPage < base+size {
			pages[i] = pages[i-1] + pvPage
			continue
		}
		pages[i] = base + rng.Uint64N(size/pvPage)*pvPage
	}
	return pages
}

func pvOverlap(a, b emtt.Span) bool { return a.GPA < b.GPA+b.Len && b.GPA < a.GPA+a.Len }

// pvFirstDiff is the first index where a and b differ, or -1.
func pvFirstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
