//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/guest-driver/agent"
)

// serveAgent serves the verbs agent on the serial port until ctx ends.
// The port stays open across host connections: when a session ends (the
// host hung up, or sent bytes that are not JSON-RPC) the port is opened
// again and the objects the host set up stay for its next session.
func serveAgent(ctx context.Context, cfg config, dev *guestdriver.Device, t *readyTransport, con *console, log *slog.Logger) int {
	svc := agent.NewService(dev, agent.Options{
		Log:   log,
		Ready: time.Duration(t.ready.Load()),
		Doorbells: func() (agent.Region, bool) {
			if gpa, size, ok := t.DoorbellRegion(); ok {
				return agent.Region{GPA: gpa, Size: size}, true
			}
			// The guest-RAM fallback: the area the driver registered.
			a, ok := dev.DoorbellArea()
			return agent.Region{GPA: a.GPA, Size: a.Len()}, ok
		},
	})
	defer svc.Close()
	for ctx.Err() == nil {
		port, err := openRawSerial(cfg.tty)
		if err != nil {
			con.printf("FAIL agent: %v", err)
			return 1
		}
		con.printf("agent serving on %s", cfg.tty)
		err = svc.Serve(ctx, port)
		if err != nil && !errors.Is(err, context.Canceled) {
			con.printf("agent session ended: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // no busy loop on a port that fails at once
		}
	}
	return 0
}
