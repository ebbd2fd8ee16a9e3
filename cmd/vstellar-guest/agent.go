//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guest-driver/agent"
)

// errRemoved ends the agent when the device is hot-unplugged.
var errRemoved = errors.New("device removed")

// serveAgent serves the verbs agent on the serial port until ctx ends or
// the device is removed (removed true). The port stays open across host
// connections: when a session ends (the host hung up, or sent bytes that
// are not JSON-RPC) the port is opened again and the objects the host
// set up stay for its next session. The host may ask for a reboot or a
// reopen of the device (agent.Options).
func serveAgent(ctx context.Context, cfg config, d *device, con *console, log *slog.Logger) (status int, removed bool) {
	svc := agent.NewService(d.dev, agent.Options{
		Log:       log,
		Ready:     time.Duration(d.t.ready.Load()),
		Doorbells: d.doorbells,
		Reboot:    func() { reboot(con) },
		Reopen:    d.reopen,
	})
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchRemoval(ctx, d.vt.Address(), func() { cancel(errRemoved) })
	for ctx.Err() == nil {
		port, err := openRawSerial(cfg.tty)
		if err != nil {
			con.printf("FAIL agent: %v", err)
			svc.Close(context.WithoutCancel(ctx))
			return 1, false
		}
		con.printf("%s %s", agentServing, cfg.tty)
		err = svc.Serve(ctx, port)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errRemoved) {
			con.printf("agent session ended: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // no busy loop on a port that fails at once
		}
	}
	if errors.Is(context.Cause(ctx), errRemoved) {
		// The device's registers are gone: no command may touch them.
		con.printf("agent: the device was removed; dropping its objects")
		svc.Forget()
		return 0, true
	}
	svc.Close(context.WithoutCancel(ctx))
	return 0, false
}

// reboot is the agent's Options.Reboot: an abrupt reboot, as a crashed
// or reset guest does it, with no driver shutdown; the next boot's driver
// finds the device as this one left it and resets its state.
func reboot(con *console) {
	con.printf("rebooting at the host's request")
	// The agent's reply is written; give the UART time to send it.
	time.Sleep(200 * time.Millisecond)
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	con.printf("reboot failed: %v", err)
}
