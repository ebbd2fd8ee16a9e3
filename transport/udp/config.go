package udp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
)

// Limits and defaults.
const (
	// DefaultPaths is the number of source ports (paths) a Conn opens when
	// Config.Paths is zero: one socket, no path entropy.
	DefaultPaths = 1
	// MaxPaths bounds Config.Paths: one socket (file descriptor) per path.
	MaxPaths = 1024
	// DefaultMaxBatch is the number of datagrams one recvmmsg/sendmmsg call
	// moves when Config.MaxBatch is zero.
	DefaultMaxBatch = 64
	// MaxBatchLimit is the kernel's limit on messages per recvmmsg/sendmmsg
	// call (UIO_MAXIOV).
	MaxBatchLimit = 1024
	// MaxDatagram is the largest UDP payload a Conn sends (IPv4: 65535 -
	// 20-byte IP header - 8-byte UDP header).
	MaxDatagram = 65507
	// maxBufferSize bounds the socket buffer sizes an operator may ask for.
	maxBufferSize = 1 << 30
)

// Errors a caller can test for with errors.Is. Returned errors wrap these
// with the detail (which address, port, interface, message index).
var (
	// ErrBadAddress: the local address is unset, of the wrong kind, or not
	// assigned to this host.
	ErrBadAddress = errors.New("udp: bad local address")
	// ErrUnknownInterface: Config.Interface names no interface.
	ErrUnknownInterface = errors.New("udp: unknown interface")
	// ErrPortInUse: a port of the path range is bound by another socket.
	ErrPortInUse = errors.New("udp: port in use")
	// ErrBadConfig: a Config field is out of range or contradicts another.
	ErrBadConfig = errors.New("udp: bad config")
	// ErrBadMessage: a Message given to WriteBatch cannot be sent as it is
	// (path out of range, bad destination, N out of range).
	ErrBadMessage = errors.New("udp: bad message")
)

// Config says where and how a Conn binds. The zero value of every field
// but Addr is a usable default.
type Config struct {
	// Addr is the local address and base port. Path i is bound to port
	// Addr.Port()+i. Port 0 picks a free range of Paths consecutive ports.
	// The address family of Addr is the family of every peer: an IPv4
	// Conn talks to IPv4 peers, an IPv6 Conn (IPV6_V6ONLY) to IPv6 peers.
	// An unspecified address (0.0.0.0, ::) receives on every local address.
	// An IPv6 zone (fe80::1%eth0) names the interface of a link-local
	// address.
	Addr netip.AddrPort
	// Interface, if set, binds every socket to this device
	// (SO_BINDTODEVICE): packets in and out use only this interface.
	Interface string
	// Paths is the number of source ports the Conn can send from (and
	// receive on), 1..MaxPaths; 0 means DefaultPaths.
	Paths int
	// RecvBuffer and SendBuffer are the socket buffer sizes in bytes per
	// path (SO_RCVBUF/SO_SNDBUF; the FORCE variants are tried first, which
	// succeed for root and exceed net.core.[rw]mem_max). 0 keeps the
	// kernel default.
	RecvBuffer, SendBuffer int
	// MaxBatch is the most datagrams one system call moves, 1..MaxBatchLimit;
	// 0 means DefaultMaxBatch. Larger batches given to ReadBatch/WriteBatch
	// are served in several calls (WriteBatch) or partly (ReadBatch).
	MaxBatch int
	// DisableGSO and DisableGRO turn UDP segmentation offload on send
	// (UDP_SEGMENT) and receive coalescing (UDP_GRO) off even where the
	// kernel supports them.
	DisableGSO, DisableGRO bool
	// Logger receives debug records on setup and warnings on offload
	// fallbacks; nil discards them.
	Logger *slog.Logger
}

// normalize fills defaults and checks ranges that need no system calls.
// It returns the config to use, with Interface set from an IPv6 zone.
func (cfg Config) normalize() (Config, error) {
	if !cfg.Addr.IsValid() {
		return cfg, fmt.Errorf("%w: address not set (want ip:port)", ErrBadAddress)
	}
	ip := cfg.Addr.Addr()
	if ip.Is4In6() {
		// An IPv4-mapped address names an IPv4 endpoint; bind it as IPv4.
		cfg.Addr = netip.AddrPortFrom(ip.Unmap(), cfg.Addr.Port())
		ip = cfg.Addr.Addr()
	}
	if ip.IsMulticast() {
		return cfg, fmt.Errorf("%w: %v is a multicast address", ErrBadAddress, ip)
	}
	if ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return cfg, fmt.Errorf("%w: %v is the broadcast address", ErrBadAddress, ip)
	}
	if z := ip.Zone(); z != "" {
		if cfg.Interface != "" && cfg.Interface != z {
			return cfg, fmt.Errorf("%w: address zone %q and Interface %q differ", ErrBadConfig, z, cfg.Interface)
		}
		if _, err := net.InterfaceByName(z); err != nil {
			return cfg, fmt.Errorf("%w: %q (zone of %v): %v", ErrUnknownInterface, z, ip, err)
		}
	}
	if cfg.Interface != "" {
		if _, err := net.InterfaceByName(cfg.Interface); err != nil {
			return cfg, fmt.Errorf("%w: %q: %v", ErrUnknownInterface, cfg.Interface, err)
		}
	}
	switch {
	case cfg.Paths == 0:
		cfg.Paths = DefaultPaths
	case cfg.Paths < 0 || cfg.Paths > MaxPaths:
		return cfg, fmt.Errorf("%w: Paths %d outside 1..%d", ErrBadConfig, cfg.Paths, MaxPaths)
	}
	if p := int(cfg.Addr.Port()); p != 0 && p+cfg.Paths-1 > 65535 {
		return cfg, fmt.Errorf("%w: ports %d..%d (Paths %d) run past 65535", ErrBadConfig, p, p+cfg.Paths-1, cfg.Paths)
	}
	switch {
	case cfg.MaxBatch == 0:
		cfg.MaxBatch = DefaultMaxBatch
	case cfg.MaxBatch < 0 || cfg.MaxBatch > MaxBatchLimit:
		return cfg, fmt.Errorf("%w: MaxBatch %d outside 1..%d", ErrBadConfig, cfg.MaxBatch, MaxBatchLimit)
	}
	if cfg.RecvBuffer < 0 || cfg.RecvBuffer > maxBufferSize {
		return cfg, fmt.Errorf("%w: RecvBuffer %d outside 0..%d", ErrBadConfig, cfg.RecvBuffer, maxBufferSize)
	}
	if cfg.SendBuffer < 0 || cfg.SendBuffer > maxBufferSize {
		return cfg, fmt.Errorf("%w: SendBuffer %d outside 0..%d", ErrBadConfig, cfg.SendBuffer, maxBufferSize)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}
