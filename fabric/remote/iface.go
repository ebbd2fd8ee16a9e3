package remote

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vstellar/vstellar/hostnet"
)

// ErrInterface: Config.Interface cannot be used as it is (the error
// says why, wrapping hostnet's ErrBadName, ErrNoInterface,
// ErrInterfaceDown or ErrNoAddress where one of those is the reason).
var ErrInterface = errors.New("remote: Interface")

// fromInterface fills what Config.Interface stands for, looked up in
// the calling thread's network namespace (where New opens the sockets):
// Listen's address if unspecified, the MTU if unset. It checks a given
// address is the interface's. It returns the interface, to log.
func (cfg Config) fromInterface(ctx context.Context) (Config, hostnet.Interface, error) {
	if !cfg.Listen.IsValid() {
		return cfg, hostnet.Interface{}, fmt.Errorf("%w: Listen: not set (want ip:port; 0.0.0.0:port or [::]:port takes the interface's address)", ErrInterface)
	}
	if err := cfg.checkInterface(); err != nil {
		return cfg, hostnet.Interface{}, err
	}
	ip := cfg.Listen.Addr().Unmap()
	var ifc hostnet.Interface
	var err error
	if ip.IsUnspecified() {
		var ap netip.AddrPort
		ap, ifc, err = hostnet.Resolve(ctx, cfg.Interface, cfg.Listen.Port(), hostnet.FamilyOf(ip))
		if err != nil {
			return cfg, ifc, fmt.Errorf("%w: %w", ErrInterface, err)
		}
		cfg.Listen = ap
	} else {
		ifc, err = hostnet.InterfaceByName(ctx, cfg.Interface)
		if err != nil {
			return cfg, ifc, fmt.Errorf("%w: %w", ErrInterface, err)
		}
		if !ifc.Has(ip) {
			return cfg, ifc, fmt.Errorf("%w: Listen %v is not an address of %q (it has %v; 0.0.0.0 or :: takes its own)", ErrInterface, cfg.Listen, cfg.Interface, ifc.Addrs)
		}
		if !ifc.Up {
			return cfg, ifc, fmt.Errorf("%w: hostnet: interface %q: %w", ErrInterface, cfg.Interface, hostnet.ErrInterfaceDown)
		}
	}
	if cfg.MTU == 0 {
		cfg.MTU = min(ifc.MTU, 65535) // lo has 65536; an IP packet has at most 65535 bytes
		if oh := overhead(cfg.Listen); cfg.MTU < oh+64 {
			return cfg, ifc, fmt.Errorf("%w: %q has MTU %d, no room for a packet (%d bytes of headers, 64 of payload at least)", ErrInterface, cfg.Interface, cfg.MTU, oh)
		}
	}
	return cfg, ifc, nil
}

// checkInterface checks Interface without looking it up: a name that
// can be an interface's, agreeing with Listen's zone if it has one.
func (cfg *Config) checkInterface() error {
	if err := hostnet.ValidateName(cfg.Interface); err != nil {
		return fmt.Errorf("%w: %w", ErrInterface, err)
	}
	if z := cfg.Listen.Addr().Zone(); z != "" && z != cfg.Interface {
		return fmt.Errorf("%w: Listen %v has zone %q, another interface", ErrInterface, cfg.Listen, z)
	}
	return nil
}
