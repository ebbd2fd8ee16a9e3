//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vstellar/vstellar/internal/guestexec"
)

// serveExec is mode exec: the kernel driver has the device; this brings
// the network up (the tools exchange their endpoints over TCP) and runs
// programs for the host until ctx ends.
func serveExec(ctx context.Context, cfg config, con *console, log *slog.Logger) int {
	if err := netUp(cfg.ip); err != nil {
		con.printf("FAIL network: %v", err)
		return 1
	}
	if cfg.ip != "" {
		con.printf("network: %s up", cfg.ip)
	}
	srv := &guestexec.Server{
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/", "LANG=C.UTF-8"},
		Log: log,
	}
	for ctx.Err() == nil {
		port, err := openRawSerial(cfg.tty)
		if err != nil {
			con.printf("FAIL exec: %v", err)
			return 1
		}
		con.printf("%s %s", agentServing, cfg.tty)
		if err := srv.Serve(ctx, port); err != nil && !errors.Is(err, context.Canceled) {
			con.printf("exec session ended: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // no busy loop on a port that fails at once
		}
	}
	return 0
}

// agentServing is what the host waits for (realvm.AgentServing).
const agentServing = "agent serving on"

// netUp brings lo up and, with an address, the first other interface
// with that address.
func netUp(addr string) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	if addr == "" {
		return nil
	}
	a, err := netlink.ParseAddr(addr)
	if err != nil {
		return err
	}
	var link netlink.Link
	// The NIC's driver may still be probing.
	for deadline := time.Now().Add(10 * time.Second); link == nil; time.Sleep(50 * time.Millisecond) {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Attrs().Flags&net.FlagLoopback == 0 && l.Type() == "device" {
				link = l
				break
			}
		}
		if link == nil && time.Now().After(deadline) {
			return fmt.Errorf("no network interface (have %d links)", len(links))
		}
	}
	if err := netlink.AddrAdd(link, a); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s: address %s: %w", link.Attrs().Name, addr, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up: %w", link.Attrs().Name, err)
	}
	return nil
}
