package twolevel

import "fmt"

// DefaultATCEntries is the ATC size when none is given: NICs have 32 to
// 64 entries, shared by all their functions.
const DefaultATCEntries = 64

// Devices are numbered below MaxDevices: an ATC key is the device id above
// the guest physical page frame.
const (
	gfnBits    = AddrBits - PageShift
	MaxDevices = 1 << (64 - gfnBits)
)

// ATC is a NIC's address translation cache: fully associative, true LRU,
// keyed by (device id, guest physical page), holding the IOMMU's leaf
// entry (host page and permissions).
//
// Entries live in small arrays. A linear-probing hash with four slots per
// entry finds one in about one probe, standing in for the hardware's
// parallel tag compare; a doubly linked list through the arrays keeps the
// exact recency order.
type ATC struct {
	key        []uint64 // entry -> device<<gfnBits | gfn
	pte        []uint64 // entry -> IOMMU leaf entry
	prev, next []int32  // LRU list, most recent at head; -1 ends it
	head, tail int32
	used       int32

	slot  []int32 // hash slot -> entry+1, 0 empty
	shift uint    // 64 - log2(len(slot))

	hits, misses, evictions uint64
}

// NewATC returns an empty ATC of entries entries (DefaultATCEntries if 0
// or less).
func NewATC(entries int) *ATC {
	if entries <= 0 {
		entries = DefaultATCEntries
	}
	if entries > 1<<24 {
		panic(fmt.Sprintf("twolevel: ATC of %d entries", entries))
	}
	bits := uint(4)
	for 1<<bits < 4*entries {
		bits++
	}
	return &ATC{
		key:   make([]uint64, entries),
		pte:   make([]uint64, entries),
		prev:  make([]int32, entries),
		next:  make([]int32, entries),
		head:  -1,
		tail:  -1,
		slot:  make([]int32, 1<<bits),
		shift: 64 - bits,
	}
}

func atcKey(dev uint32, gfn uint64) uint64 { return uint64(dev)<<gfnBits | gfn }

func (a *ATC) home(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> a.shift }

// lookup returns the cached leaf entry of (dev, gfn) and makes it the most
// recently used.
func (a *ATC) lookup(dev uint32, gfn uint64) (uint64, bool) {
	k := atcKey(dev, gfn)
	mask := uint64(len(a.slot) - 1)
	for i := a.home(k); ; i = (i + 1) & mask {
		s := a.slot[i]
		if s == 0 {
			a.misses++
			return 0, false
		}
		if e := s - 1; a.key[e] == k {
			a.hits++
			a.touch(e)
			return a.pte[e], true
		}
	}
}

// insert caches (dev, gfn) -> pte, which lookup just missed, evicting the
// least recently used entry when the ATC is full.
func (a *ATC) insert(dev uint32, gfn, pte uint64) {
	var e int32
	if int(a.used) < len(a.key) {
		e = a.used
		a.used++
	} else {
		e = a.tail
		a.unhash(a.key[e])
		a.unlink(e)
		a.evictions++
	}
	k := atcKey(dev, gfn)
	a.key[e], a.pte[e] = k, pte
	a.pushFront(e)
	mask := uint64(len(a.slot) - 1)
	i := a.home(k)
	for a.slot[i] != 0 {
		i = (i + 1) & mask
	}
	a.slot[i] = e + 1
}

// unhash removes key k, which is cached, from the hash, shifting back the
// entries of its probe run so that lookups never stop at a hole.
func (a *ATC) unhash(k uint64) {
	mask := uint64(len(a.slot) - 1)
	i := a.home(k)
	for a.key[a.slot[i]-1] != k {
		i = (i + 1) & mask
	}
	for j := i; ; {
		a.slot[i] = 0
		for {
			j = (j + 1) & mask
			if a.slot[j] == 0 {
				return
			}
			// The entry at j may fill the hole at i unless its home lies
			// cyclically in (i, j].
			h := a.home(a.key[a.slot[j]-1])
			if (j-h)&mask >= (j-i)&mask {
				break
			}
		}
		a.slot[i] = a.slot[j]
		i = j
	}
}

func (a *ATC) touch(e int32) {
	if a.head == e {
		return
	}
	a.unlink(e)
	a.pushFront(e)
}

func (a *ATC) unlink(e int32) {
	p, n := a.prev[e], a.next[e]
	if p >= 0 {
		a.next[p] = n
	} else {
		a.head = n
	}
	if n >= 0 {
		a.prev[n] = p
	} else {
		a.tail = p
	}
}

func (a *ATC) pushFront(e int32) {
	a.prev[e], a.next[e] = -1, a.head
	if a.head >= 0 {
		a.prev[a.head] = e
	} else {
		a.tail = e
	}
	a.head = e
}

// Invalidate drops every entry (an ATS invalidation of everything, as
// after an IOMMU domain change). The counters stay.
func (a *ATC) Invalidate() {
	clear(a.slot)
	a.head, a.tail, a.used = -1, -1, 0
}

// ATCStats counts ATC lookups.
type ATCStats struct {
	Entries                 int // capacity
	Used                    int // entries filled
	Hits, Misses, Evictions uint64
}

// Stats returns the ATC's counters.
func (a *ATC) Stats() ATCStats {
	return ATCStats{Entries: len(a.key), Used: int(a.used), Hits: a.hits, Misses: a.misses, Evictions: a.evictions}
}
