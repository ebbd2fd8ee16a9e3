package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/hostnet"
	"github.com/vstellar/vstellar/internal/confcheck"
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/cc"
	"github.com/vstellar/vstellar/transport/pathsel"
)

// FabricSpec configures the cross-host fabric (package fabric/remote):
// how this daemon's devices reach the devices of other hosts. Without it
// the daemon's devices reach only each other, and their GIDs are
// link-local.
//
//	"fabric": {
//	  "listen": "10.0.0.1:4791",
//	  "gid_prefix": "fec0:0:1:1::/64",
//	  "peers": [{"gid_prefix": "fec0:0:2:2::/64", "address": "10.0.0.2:4791"}],
//	  "secret_file": "/etc/vstellar/fabric.key",
//	  "mtu": 9000
//	}
//
// or, binding by interface (its address and MTU):
//
//	"fabric": {"interface": "eth1", "listen": ":4791", ...}
type FabricSpec struct {
	// Listen is the UDP address the transport binds; with Paths > 1 it
	// is the first of Paths consecutive ports (the source ports that
	// spread a connection over an ECMP network). With Interface, an
	// unspecified address takes the interface's: "0.0.0.0:4791" (or
	// just ":4791") its IPv4 address, "[::]:4791" its IPv6 one
	// (ParseListen).
	Listen netip.AddrPort `json:"listen"`
	// Interface, if set, is the host network interface the fabric uses:
	// its sockets are bound to it (SO_BINDTODEVICE), Listen's address
	// comes from it if unspecified (and must otherwise be one of its),
	// and its MTU is MTU's default. It is looked up when the fabric
	// starts (in the ListenIn namespace, if any).
	Interface string `json:"interface,omitempty"`
	// GIDPrefix is this host's /64: every device's GID index 0 is the
	// prefix followed by its node GUID, and the peers route it here.
	GIDPrefix netip.Prefix `json:"gid_prefix"`
	// Peers are the other hosts, each with the GIDs it owns; a
	// destination goes to the peer of the longest matching prefix.
	Peers []remote.Peer `json:"peers,omitempty"`
	// SecretFile holds the cluster's key (16 to 4096 bytes, the same on
	// every host) from which connection ids and tokens are derived, so
	// that no one without it can forge a packet that is accepted.
	SecretFile string `json:"secret_file"`
	// MTU is the host network's MTU (default Interface's, or 1500).
	MTU int `json:"mtu,omitempty"`
	// Paths is the number of UDP source ports (default 1).
	Paths int `json:"paths,omitempty"`
	// Recovery is "selective" (default) or "go-back-n", what hardware
	// RNICs do (a baseline for measurements).
	Recovery string `json:"recovery,omitempty"`
	// Spray is the path selector each connection spreads its packets
	// over the paths with: "single" (default: one path per connection,
	// like RoCE's ECMP hashing), "ops", "rr", "dwrr", "bestrtt", "p2c"
	// or "reps" (docs/transport.md).
	Spray string `json:"spray,omitempty"`
	// CC is the congestion controller: "fixed" (default: a fixed
	// window), "swift" or "cubic".
	CC string `json:"cc,omitempty"`
}

const maxSecretLen = 4096

// ParseListen parses a fabric listen address: "ip:port", "[ipv6]:port",
// or ":port", which is "0.0.0.0:port" (with an interface: its IPv4
// address; without: every local address).
func ParseListen(s string) (netip.AddrPort, error) {
	if port, ok := strings.CutPrefix(s, ":"); ok {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("listen %q: port %q is not 0..65535", s, port)
		}
		return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(p)), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("listen %q: want ip:port, [ipv6]:port or :port: %w", s, err)
	}
	return ap, nil
}

// UnmarshalJSON reads the "fabric" object, strictly (an unknown field
// is an error, as everywhere in the config), with "listen" in any form
// ParseListen takes.
func (f *FabricSpec) UnmarshalJSON(b []byte) error {
	type plain FabricSpec // without this method
	var aux struct {
		plain
		Listen *string `json:"listen"`
	}
	if err := confcheck.DecodeStrict(b, &aux); err != nil {
		return err
	}
	*f = FabricSpec(aux.plain)
	if aux.Listen != nil {
		ap, err := ParseListen(*aux.Listen)
		if err != nil {
			return err
		}
		f.Listen = ap
	}
	return nil
}

// remoteConfig is the fabric/remote configuration the spec describes,
// with secret as the cluster key. Errors wrap api.ErrInvalid and name
// the field.
func (f *FabricSpec) remoteConfig(secret []byte, log *slog.Logger) (remote.Config, error) {
	bad := func(format string, args ...any) (remote.Config, error) {
		return remote.Config{}, fmt.Errorf("%w: fabric: "+format, append([]any{api.ErrInvalid}, args...)...)
	}
	// A device's GID is the prefix and its 64-bit GUID.
	if p := f.GIDPrefix; !p.IsValid() || !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() != 64 || p.Masked() != p {
		return bad("gid_prefix %v: want an IPv6 /64 without host bits (the GID's low 64 bits are the device's GUID)", f.GIDPrefix)
	}
	if f.GIDPrefix.Addr().IsLinkLocalUnicast() {
		return bad("gid_prefix %v is link-local: other hosts cannot route to it", f.GIDPrefix)
	}
	var t transport.Config
	switch strings.ToLower(f.Recovery) {
	case "", "selective":
	case "go-back-n":
		t.Recovery = transport.GoBackN
	default:
		return bad("recovery %q: want selective or go-back-n", f.Recovery)
	}
	if f.Interface != "" {
		if err := hostnet.ValidateName(f.Interface); err != nil {
			return bad("interface: %v", err)
		}
		if !f.Listen.IsValid() {
			return bad("listen: not set (with interface %q, give at least the port: \":4791\")", f.Interface)
		}
	}
	cfg := remote.Config{Listen: f.Listen, Interface: f.Interface, Paths: f.Paths, GIDPrefix: f.GIDPrefix, Peers: f.Peers,
		Secret: secret, MTU: f.MTU, Transport: t, Log: log}
	if f.Spray != "" {
		k, err := pathsel.ParseKind(f.Spray)
		if err != nil {
			return bad("spray: %v", err)
		}
		cfg.Spray.Kind = k
	}
	if f.CC != "" {
		k, err := cc.ParseKind(f.CC)
		if err != nil {
			return bad("cc: %v", err)
		}
		cfg.CC.Kind = k
	}
	if err := cfg.Validate(); err != nil {
		return bad("%v", err)
	}
	return cfg, nil
}

// validate checks the spec; the secret file is read only at start.
func (f *FabricSpec) validate() error {
	if f.SecretFile == "" {
		return fmt.Errorf("%w: fabric: secret_file is required (the cluster key connection ids and tokens derive from)", api.ErrInvalid)
	}
	_, err := f.remoteConfig(bytes.Repeat([]byte{1}, remote.MinSecret), nil)
	return err
}

// readSecret reads the cluster key: the file's bytes without surrounding
// white space.
func readSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fabric: secret_file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < remote.MinSecret || len(b) > maxSecretLen {
		return nil, fmt.Errorf("%w: fabric: secret_file %s holds %d bytes, want %d..%d", api.ErrInvalid, path, len(b), remote.MinSecret, maxSecretLen)
	}
	return b, nil
}

// startFabric opens the cross-host fabric, if one is configured, and
// makes it the devices' fabric: once, before the first device. Its I/O
// loop runs until Shutdown, not until ctx (the first caller's) ends.
func (m *Manager) startFabric(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	spec := m.cfg.Fabric
	if spec == nil || m.remote != nil {
		return nil
	}
	secret, err := readSecret(spec.SecretFile)
	if err != nil {
		return err
	}
	cfg, err := spec.remoteConfig(secret, m.log.With("component", "fabric"))
	if err != nil {
		return err
	}
	var f *remote.Fabric
	open := func() error {
		var err error
		f, err = remote.New(ctx, cfg)
		return err
	}
	if m.cfg.ListenIn != nil {
		err = m.cfg.ListenIn(open)
	} else {
		err = open()
	}
	if errors.Is(err, remote.ErrInterface) {
		// The interface the config names is missing, down or without
		// an address: the config does not fit this host.
		return fmt.Errorf("%w: fabric: %w", api.ErrInvalid, err)
	}
	if err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			m.log.Error("fabric stopped", "err", err)
		}
	}()
	m.remote, m.remoteStop = f, func() error {
		cancel()
		err := f.Close()
		<-done
		return err
	}
	m.shared.Fabric, m.shared.GIDPrefix = f, spec.GIDPrefix
	m.log.Info("cross-host fabric up", "addr", f.Addr(), "interface", spec.Interface, "mtu", f.MTU(), "gid_prefix", spec.GIDPrefix, "peers", len(spec.Peers))
	return nil
}

// Fabric is the daemon's cross-host fabric, or nil if none is configured
// (or it has not started yet).
func (m *Manager) Fabric() *remote.Fabric {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.remote
}
