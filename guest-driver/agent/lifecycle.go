package agent

import (
	"context"
	"errors"
	"fmt"
	"net/rpc"
)

// The device's life cycle as the host drives it: a guest reboot, and a
// reopen of the device after vstellard was restarted under the VM (the
// new daemon's device knows none of the objects, so the driver must
// reset the device and probe it again). The guest program does both
// (Options.Reboot, Options.Reopen); the Service carries the requests.

// errNoDevice: Forget dropped the device, or a Reopen failed.
var errNoDevice = errors.New("no device (it was removed, or a reopen failed: call Reopen)")

// Forget stops any loop and drops the device and what Setup made
// without a command to the device: for a device that is gone
// (hot-unplugged), whose registers must not be touched again. Later
// calls fail, and Close has nothing left to destroy.
func (s *Service) Forget() {
	s.stopLoop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st, s.dev = nil, nil
}

// reopen answers Reopen.
func (s *Service) reopen(ctx context.Context) error {
	if s.o.Reopen == nil {
		return errors.New("reopen: the guest program does not offer it")
	}
	s.stopLoop()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The objects were the old device's, and their memory goes with its
	// transport: dropped, not destroyed.
	s.st = nil
	ctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	dev, err := s.o.Reopen(ctx)
	s.dev = dev
	if err != nil {
		s.dev = nil
		return fmt.Errorf("reopen: %w", err)
	}
	s.log.Info("device reopened")
	return nil
}

func (r *rpcAgent) Reboot(_ *Empty, _ *Empty) error {
	if r.s.o.Reboot == nil {
		return errors.New("reboot: the guest program does not offer it")
	}
	return nil // afterReply reboots once this reply is out
}

func (r *rpcAgent) Reopen(_ *Empty, _ *Empty) error { return wireError(r.s.reopen(r.ctx)) }

// afterReply runs Options.Reboot once the reply to a Reboot that
// succeeded is written: the host learns the guest agreed before the
// guest goes away.
type afterReply struct {
	rpc.ServerCodec
	s *Service
}

func (c afterReply) WriteResponse(r *rpc.Response, body any) error {
	err := c.ServerCodec.WriteResponse(r, body)
	if err == nil && r.Error == "" && r.ServiceMethod == rpcName+".Reboot" && c.s.o.Reboot != nil {
		c.s.log.Info("rebooting at the host's request")
		go c.s.o.Reboot()
	}
	return err
}

// Reboot asks the guest program to reboot the guest. It returns once the
// guest agreed; the reboot follows, and the connection's next answers
// come from the next boot's agent.
func (c *Client) Reboot(ctx context.Context) error {
	_, err := get[Empty](ctx, c, "Reboot", 0, &Empty{})
	return err
}

// Reopen asks the guest program to reset the device and open it again
// (the driver's probe, RESET_STATE included), as after a restarted
// vstellard. What Setup made is gone afterwards: call Setup again.
func (c *Client) Reopen(ctx context.Context) error {
	_, err := get[Empty](ctx, c, "Reopen", 0, &Empty{})
	return err
}
