package agent

import (
	"fmt"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// The request and reply types of the remote API. Buffer positions are
// offsets into the buffer Setup registered; remote positions are the
// peer's MR addresses (its MRInfo.Addr plus an offset) and rkey, as a
// verbs application would receive them from its peer.

// Empty is the argument or reply of calls that carry none.
type Empty struct{}

// Region is a guest-physical range.
type Region struct {
	GPA  uint64 `json:"gpa"`
	Size uint64 `json:"size"`
}

// InfoReply describes the device and the agent.
type InfoReply struct {
	ABIVersion uint32 `json:"abi_version"`
	// Status is config space status (abi.ConfigStatus* bits);
	// DoorbellMode names it: "shmem", "guest-ram" or "none".
	Status       uint32     `json:"status"`
	DoorbellMode string     `json:"doorbell_mode"`
	NodeGUID     uint64     `json:"node_guid"`
	GID          abi.GID    `json:"gid"`
	Limits       abi.Limits `json:"limits"`
	// PortState and ActiveMTU are QUERY_PORT's answer.
	PortState abi.PortState `json:"port_state"`
	ActiveMTU abi.MTU       `json:"active_mtu"`
	// Doorbells is where the doorbell region lies in guest-physical
	// memory, when the guest program told the Service (Options).
	Doorbells *Region `json:"doorbells,omitempty"`
	// ReadyMicros is the device-ready time the guest program measured
	// (Options.Ready); 0 when it did not say.
	ReadyMicros float64 `json:"ready_us"`
	SetUp       bool    `json:"set_up"`
	Runtime     string  `json:"runtime"` // Go version, GOARCH, CPUs
}

// SetupArgs size the verbs objects Setup creates. Zero fields take the
// defaults (DefaultSetup).
type SetupArgs struct {
	BufSize   uint64            `json:"buf_size"`
	Access    abi.Access        `json:"access"`
	CQEntries int               `json:"cq_entries"`
	Cap       guestdriver.QPCap `json:"cap"`
}

// DefaultSetup is what Setup creates for zero SetupArgs: a 1 MiB buffer
// with every access, 256-entry CQs, a QP of 64 send and 64 receive WQEs
// with two SGEs each and 64 inline bytes.
var DefaultSetup = SetupArgs{
	BufSize:   1 << 20,
	Access:    abi.AccessAll,
	CQEntries: 256,
	Cap:       guestdriver.QPCap{SQSize: 64, RQSize: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64},
}

// MRInfo is what a peer needs to reach the buffer: its first address
// (the MR's IOVA), rkey and length.
type MRInfo struct {
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Len  uint64 `json:"len"`
}

// SetupReply is what Setup made: the QP's endpoint and the buffer's MR.
type SetupReply struct {
	Endpoint guestdriver.Endpoint `json:"endpoint"`
	MR       MRInfo               `json:"mr"`
}

// ConnectArgs name the peer QP (its SetupReply.Endpoint).
type ConnectArgs struct {
	Peer guestdriver.Endpoint `json:"peer"`
}

// FillArgs fill Len bytes at Off with Pattern(Seed).
type FillArgs struct {
	Off  uint64 `json:"off"`
	Len  uint64 `json:"len"`
	Seed uint64 `json:"seed"`
}

// StoreArgs write Data at Off (at most MaxIO bytes).
type StoreArgs struct {
	Off  uint64 `json:"off"`
	Data []byte `json:"data"`
}

// RangeArgs name Len bytes at Off (Read: at most MaxIO).
type RangeArgs struct {
	Off uint64 `json:"off"`
	Len uint64 `json:"len"`
}

// ReadReply holds the bytes read.
type ReadReply struct {
	Data []byte `json:"data"`
}

// DigestReply is the SHA-256 of a range, in hex.
type DigestReply struct {
	SHA256 string `json:"sha256"`
}

// MaxIO bounds Store and Read: they move bytes through the RPC, which
// is for small things (a counter, a header); Digest checks the rest.
const MaxIO = 4096

// Segment is a scatter/gather element: Len bytes at Off of the buffer.
type Segment struct {
	Off uint64 `json:"off"`
	Len uint32 `json:"len"`
}

// SendArgs is one send work request (guestdriver.SendWR with SGEs as
// buffer offsets).
type SendArgs struct {
	WRID       uint64       `json:"wr_id"`
	Opcode     abi.WROpcode `json:"opcode"`
	SGL        []Segment    `json:"sgl,omitempty"`
	Inline     []byte       `json:"inline,omitempty"`
	Signaled   bool         `json:"signaled"`
	Solicited  bool         `json:"solicited,omitempty"`
	Fence      bool         `json:"fence,omitempty"`
	Imm        uint32       `json:"imm,omitempty"`
	RemoteAddr uint64       `json:"remote_addr,omitempty"`
	RKey       uint32       `json:"rkey,omitempty"`
	CompareAdd uint64       `json:"compare_add,omitempty"`
	Swap       uint64       `json:"swap,omitempty"`
}

// PostSendArgs is a batch of send work requests.
type PostSendArgs struct {
	WRs []SendArgs `json:"wrs"`
}

// RecvArgs is one receive work request.
type RecvArgs struct {
	WRID uint64    `json:"wr_id"`
	SGL  []Segment `json:"sgl,omitempty"`
}

// PostRecvArgs is a batch of receive work requests.
type PostRecvArgs struct {
	WRs []RecvArgs `json:"wrs"`
}

// MaxBatch bounds the work requests of one PostSend or PostRecv, and
// MaxSGL the SGEs of one request (the QP's own limits apply too).
const (
	MaxBatch = 256
	MaxSGL   = 32
)

// Queue names a CQ: the QP's send or receive CQ.
type Queue string

const (
	SendQueue Queue = "send"
	RecvQueue Queue = "recv"
)

// PollArgs poll a CQ until Min completions arrived (at most Max are
// returned) or TimeoutMs passed.
type PollArgs struct {
	Queue     Queue `json:"queue"`
	Min       int   `json:"min"`
	Max       int   `json:"max"`
	TimeoutMs int   `json:"timeout_ms"`
}

// Completion is one work completion.
type Completion struct {
	WRID    uint64       `json:"wr_id"`
	Status  abi.WCStatus `json:"status"`
	Opcode  abi.WCOpcode `json:"opcode"`
	ByteLen uint32       `json:"byte_len"`
	Imm     uint32       `json:"imm"`
	WithImm bool         `json:"with_imm"`
	QPN     uint32       `json:"qpn"`
	SrcQP   uint32       `json:"src_qp"`
}

// PollReply holds the completions in the order the device wrote them.
type PollReply struct {
	WCs []Completion `json:"wcs"`
}

// RegMRAtArgs name guest-physical memory to register: Len bytes at GPA.
// Pages sends a page list of 4 KiB pages rather than one contiguous
// range. The agent deregisters at once whatever the device accepts.
type RegMRAtArgs struct {
	GPA    uint64     `json:"gpa"`
	Len    uint64     `json:"len"`
	Access abi.Access `json:"access"`
	Pages  bool       `json:"pages"`
}

// RegMRAtReply says the device accepted the registration (then undone):
// a refusal is an error carrying the device's status.
type RegMRAtReply struct {
	LKey uint32 `json:"lkey"`
}

// BandwidthArgs run a WRITE bandwidth loop: Size-byte signalled WRITEs
// from LocalOff to RemoteAddr, Window in flight, until Count completed or
// DurationMs passed (whichever is first; at least one bound is needed).
type BandwidthArgs struct {
	LocalOff   uint64 `json:"local_off"`
	Size       uint32 `json:"size"`
	Window     int    `json:"window"`
	Count      int    `json:"count"`
	DurationMs int    `json:"duration_ms"`
	RemoteAddr uint64 `json:"remote_addr"`
	RKey       uint32 `json:"rkey"`
}

// BandwidthReply is what the loop moved and how fast.
type BandwidthReply struct {
	Writes int     `json:"writes"`
	Bytes  uint64  `json:"bytes"`
	Micros float64 `json:"us"`
	Gbps   float64 `json:"gbps"`
}

// PingArgs run the initiator of an 8-byte inline WRITE ping-pong: it
// writes Base+i into the peer's 8 bytes at RemoteAddr and waits until
// the peer's Echo wrote Base+i into its own 8 bytes at LocalOff, for
// i = 1..Warmup+Count; only the last Count round trips are measured.
// Base makes each run's values new, so bytes a previous run left behind
// never pass for an answer.
type PingArgs struct {
	LocalOff   uint64 `json:"local_off"`
	RemoteAddr uint64 `json:"remote_addr"`
	RKey       uint32 `json:"rkey"`
	Base       uint64 `json:"base"`
	Count      int    `json:"count"`
	Warmup     int    `json:"warmup"`
	TimeoutMs  int    `json:"timeout_ms"`
}

// PingReply: latency is half the round trip, as ib_write_lat reports it.
type PingReply struct {
	Samples int     `json:"samples"`
	MinUs   float64 `json:"min_us"`
	P50Us   float64 `json:"p50_us"`
	P90Us   float64 `json:"p90_us"`
	P99Us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us"`
	MeanUs  float64 `json:"mean_us"`
}

// EchoArgs run the responder of the ping-pong: for i = 1..Count it waits
// until its 8 bytes at LocalOff hold Base+i and writes Base+i to the
// initiator's 8 bytes at RemoteAddr. Count is the initiator's
// Warmup+Count.
type EchoArgs struct {
	LocalOff   uint64 `json:"local_off"`
	RemoteAddr uint64 `json:"remote_addr"`
	RKey       uint32 `json:"rkey"`
	Base       uint64 `json:"base"`
	Count      int    `json:"count"`
	TimeoutMs  int    `json:"timeout_ms"`
}

// EchoReply counts the values echoed.
type EchoReply struct {
	Echoed int `json:"echoed"`
}

// StreamArgs start a WRITE stream that runs until StreamStop (or
// MaxDurationMs): WRITE i copies Size bytes from slot i%Slots of the
// local area at LocalOff to the same slot at RemoteAddr, Window in
// flight. Before each WRITE the slot's first 8 bytes are set to i, the
// rest holds Pattern(Seed), so the remote area ends up equal to the
// local one once every slot has been written, whatever was lost would
// show as a difference.
type StreamArgs struct {
	LocalOff      uint64 `json:"local_off"`
	Size          uint32 `json:"size"`
	Slots         int    `json:"slots"`
	Window        int    `json:"window"`
	Seed          uint64 `json:"seed"`
	RemoteAddr    uint64 `json:"remote_addr"`
	RKey          uint32 `json:"rkey"`
	MaxDurationMs int    `json:"max_duration_ms"`
}

// StreamStatus is a stream's progress. Err is the first failure (a
// completion error or a post that failed); the stream stops at it.
type StreamStatus struct {
	Running   bool    `json:"running"`
	Posted    uint64  `json:"posted"`
	Completed uint64  `json:"completed"`
	Bytes     uint64  `json:"bytes"`
	Micros    float64 `json:"us"`
	Err       string  `json:"error,omitempty"`
	// MaxGapUs is the longest time between two completions: a pause of
	// the VM shows here.
	MaxGapUs float64 `json:"max_gap_us"`
}

// StreamResult is a stopped stream: its final status and the SHA-256 of
// the local area (Slots*Size bytes at LocalOff), which the remote area
// must equal once Completed >= Slots.
type StreamResult struct {
	StreamStatus
	LocalSHA256 string `json:"local_sha256"`
}

func (c Completion) String() string {
	s := fmt.Sprintf("{wr %d %v %v len %d qp %d", c.WRID, c.Opcode, c.Status, c.ByteLen, c.QPN)
	if c.WithImm {
		s += fmt.Sprintf(" imm %#x", c.Imm)
	}
	return s + "}"
}
