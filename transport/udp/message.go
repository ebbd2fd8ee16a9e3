package udp

import (
	"net/netip"
	"sync/atomic"
)

// Message is one datagram in a batch. The caller owns Buf; the Conn never
// keeps a reference to it after ReadBatch or WriteBatch returns.
type Message struct {
	// Buf holds the datagram in Buf[:N]. ReadBatch receives into Buf
	// (len(Buf) is the largest datagram it can take); WriteBatch sends
	// Buf[:N].
	Buf []byte
	// N is the datagram's length.
	N int
	// Addr is the peer: the source on ReadBatch, the destination on
	// WriteBatch.
	Addr netip.AddrPort
	// Path is the local path index: on ReadBatch the path (local port
	// base+Path) the datagram arrived on, on WriteBatch the path to send
	// from (source port base+Path).
	Path int
}

// Offload reports which segmentation offloads a Conn uses.
type Offload struct {
	// GSO: WriteBatch hands runs of equal-size datagrams to one peer to
	// the kernel as one UDP_SEGMENT send. It turns off by itself if the
	// kernel refuses it at send time (EIO: no checksum offload).
	GSO bool
	// GRO: the kernel may coalesce received datagrams of one flow
	// (UDP_GRO); ReadBatch splits them again.
	GRO bool
}

// Stats are a Conn's counters since Listen. They only grow.
type Stats struct {
	// Truncated counts datagrams dropped because they did not fit the
	// receive buffer given to ReadBatch.
	Truncated uint64
	// GSOSends counts kernel sends that carried more than one datagram;
	// GSODatagrams counts the datagrams they carried.
	GSOSends, GSODatagrams uint64
	// GSOFallbacks counts segmented sends the kernel refused that were
	// sent again one datagram at a time.
	GSOFallbacks uint64
	// GROBuffers counts received buffers the kernel had coalesced from
	// more than one datagram; GRODatagrams counts the datagrams in them.
	GROBuffers, GRODatagrams uint64
}

// counters is the live, concurrently updated form of Stats.
type counters struct {
	truncated                atomic.Uint64
	gsoSends, gsoDatagrams   atomic.Uint64
	gsoFallbacks             atomic.Uint64
	groBuffers, groDatagrams atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Truncated:    c.truncated.Load(),
		GSOSends:     c.gsoSends.Load(),
		GSODatagrams: c.gsoDatagrams.Load(),
		GSOFallbacks: c.gsoFallbacks.Load(),
		GROBuffers:   c.groBuffers.Load(),
		GRODatagrams: c.groDatagrams.Load(),
	}
}
