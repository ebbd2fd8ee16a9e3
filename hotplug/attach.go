package hotplug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Attached is a device Attach plugged into a VM.
type Attached struct {
	ID      string `json:"id"`
	Chardev string `json:"chardev"`
	Driver  string `json:"driver"`
	Socket  string `json:"socket"`
	Bus     string `json:"bus,omitempty"`
	// PCI is the device as query-pci shows it; nil if query-pci does
	// not list it (Note says why).
	PCI  *PCIDevice `json:"pci,omitempty"`
	Note string     `json:"note,omitempty"`
}

// Detached is a device Detach unplugged.
type Detached struct {
	ID      string `json:"id"`
	Chardev string `json:"chardev,omitempty"` // the chardev removed with it
	Note    string `json:"note,omitempty"`
}

// Attach hot-plugs the device s into the VM:
//
//  1. chardev-add ID-chr, a unix socket client of s.Socket (QEMU
//     connects to vstellard at once, or with reconnect-ms);
//  2. device_add {driver, id, chardev, virtio-id, num_vqs, vq_size,
//     config_size[, bus]}: QEMU negotiates with vstellard while it
//     realizes the device, so the daemon must be serving the socket;
//  3. query-pci to confirm the device is there and find its address.
//
// If a step fails, what the earlier steps added is removed again
// (device_del and its DEVICE_DELETED, chardev-remove) so that QEMU is
// left as it was; the *StepError says which step failed with QEMU's
// error, and what was undone. A bad Spec gives an error wrapping
// ErrInvalid and sends nothing.
func (c *Client) Attach(ctx context.Context, spec Spec) (Attached, error) {
	if err := spec.Validate(); err != nil {
		return Attached{}, fmt.Errorf("attach: %w", err)
	}
	s := spec.WithDefaults()
	c.ops.Lock()
	defer c.ops.Unlock()
	a := Attached{ID: s.ID, Chardev: s.ChardevID(), Driver: s.Driver, Socket: s.Socket, Bus: s.Bus}
	log := c.log.With("id", s.ID)

	// fail undoes what QEMU may hold: the device and the chardev when
	// their command succeeded (sure) or got no answer (unsure).
	fail := func(step string, err error, device, deviceSure, chardevSure bool) (Attached, error) {
		se := &StepError{Op: "attach", ID: s.ID, Step: step, Err: err, Hint: c.hint(s, step, err)}
		se.RolledBack, se.RollbackErr = c.rollback(ctx, s, device, deviceSure, chardevSure)
		log.Warn("attach failed", "err", se)
		return Attached{}, se
	}
	unanswered := func(err error) bool { return qmpClass(err) == "" }

	data := map[string]any{
		"addr":   map[string]any{"type": "unix", "data": map[string]any{"path": s.Socket}},
		"server": false,
	}
	if s.Reconnect > 0 {
		data["reconnect-ms"] = s.Reconnect.Milliseconds()
	}
	_, err := c.execute(ctx, "chardev-add", map[string]any{
		"id":      a.Chardev,
		"backend": map[string]any{"type": "socket", "data": data},
	})
	if err != nil {
		if !unanswered(err) {
			// Refused: QEMU added nothing, and a chardev of that id
			// that exists belongs to someone else.
			return Attached{}, &StepError{Op: "attach", ID: s.ID, Step: "chardev-add", Err: err}
		}
		return fail("chardev-add", err, false, false, false)
	}
	log.Debug("chardev added", "chardev", a.Chardev, "socket", s.Socket)
	if s.Reconnect > 0 {
		// With reconnect-ms QEMU connects in the background, and a
		// device_add that finds the chardev not yet connected fails
		// (vhost_backend_init: Protocol error).
		if err := c.waitConnected(ctx, a.Chardev); err != nil {
			return fail("chardev-add", err, false, false, true)
		}
	}

	args := map[string]any{
		"driver":      s.Driver,
		"id":          s.ID,
		"chardev":     a.Chardev,
		"virtio-id":   s.VirtioID,
		"num_vqs":     s.NumQueues,
		"vq_size":     s.QueueSize,
		"config_size": s.ConfigSize,
	}
	if s.Bus != "" {
		args["bus"] = s.Bus
	}
	if _, err := c.execute(ctx, "device_add", args); err != nil {
		return fail("device_add", err, unanswered(err), false, true)
	}
	log.Debug("device added", "driver", s.Driver)

	ret, err := c.execute(ctx, "query-pci", nil)
	if err != nil {
		return fail("query-pci", err, true, true, true)
	}
	d, found, err := findPCI(ret, s.ID)
	if err != nil {
		return fail("query-pci", err, true, true, true)
	}
	if found {
		a.PCI = &d
	} else {
		// Not on any listed bus: behind a bridge the guest's firmware
		// has not numbered yet, or not a PCI device. Make sure it exists.
		ret, err := c.execute(ctx, "qom-get", map[string]any{"path": peripheral(s.ID), "property": "type"})
		var typ string
		if err == nil && (json.Unmarshal(ret, &typ) != nil || typ != s.Driver) {
			err = fmt.Errorf("%w: %s is a %s, not a %s", ErrProtocol, peripheral(s.ID), ret, s.Driver)
		}
		if err != nil {
			return fail("qom-get type", err, true, qmpClass(err) != "DeviceNotFound", true)
		}
		a.Note = "query-pci does not list it: it is behind a bridge whose bus the guest's firmware has not numbered yet (guest not booted?) or it is not a PCI device"
	}
	log.Info("device attached", "driver", s.Driver, "pci", a.PCI, "bus", s.Bus)
	return a, nil
}

// hint explains a few failures whose cause QEMU's message hides.
func (c *Client) hint(s Spec, step string, err error) string {
	var qe *QMPError
	if step != "device_add" || !errors.As(err, &qe) {
		return ""
	}
	switch {
	case s.Driver == DefaultDriver && !c.version.AtLeast(10, 2):
		return fmt.Sprintf("QEMU %s cannot create %s: it is user-creatable from QEMU 10.2", c.version, DefaultDriver)
	case strings.Contains(qe.Desc, "does not support hotplugging"):
		return "the root bus of q35 takes no hot-plug: give a free pcie-root-port as the bus"
	}
	return ""
}

// rollback removes the device (if device) and the chardev of s. A
// "sure" part was added; one that is not sure may not exist, and its
// absence is no error. It runs on a context of its own, as the caller's
// may be why Attach failed, and on a fresh connection if Attach's is
// gone (a command that timed out closes it).
func (c *Client) rollback(ctx context.Context, s Spec, device, deviceSure, chardevSure bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.RollbackTimeout)
	defer cancel()
	rc := c
	if err := c.err(); err != nil {
		if err == ErrClosed {
			return nil, fmt.Errorf("the client was closed: %s may hold device %s and chardev %s", c.path, s.ID, s.ChardevID())
		}
		nc, err := dial(ctx, c.path, c.opts)
		if err != nil {
			return nil, fmt.Errorf("reconnecting to undo: %w", err)
		}
		defer nc.Close()
		rc = nc
	}
	var done []string
	if device {
		step, err := rc.unplug(ctx, s.ID)
		switch {
		case err == nil:
			done = append(done, "device_del "+s.ID)
		case !deviceSure && step == "device_del" && qmpClass(err) == "DeviceNotFound":
		default:
			return done, fmt.Errorf("%s %s: %w", step, s.ID, err)
		}
	}
	_, err := rc.execute(ctx, "chardev-remove", map[string]any{"id": s.ChardevID()})
	switch {
	case err == nil:
		done = append(done, "chardev-remove "+s.ChardevID())
	case !chardevSure && notFound(err):
	default:
		return done, fmt.Errorf("chardev-remove %s: %w", s.ChardevID(), err)
	}
	return done, nil
}

// notFound reports QEMU's "not found" answers: class DeviceNotFound, or
// GenericError "Chardev 'x' not found".
func notFound(err error) bool {
	var qe *QMPError
	return errors.As(err, &qe) && (qe.Class == "DeviceNotFound" || strings.HasSuffix(qe.Desc, " not found"))
}

// unplug sends device_del and waits for the device's DEVICE_DELETED. It
// returns the step that failed.
func (c *Client) unplug(ctx context.Context, id string) (string, error) {
	// Subscribe first: QEMU may send the event before the reply.
	w := c.subscribe(deviceDeleted(id))
	defer c.unsubscribe(w)
	if _, err := c.execute(ctx, "device_del", map[string]any{"id": id}); err != nil {
		var qe *QMPError
		// An unplug already under way (an earlier Detach that gave up
		// waiting) ends with the same event.
		if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "already in the process of unplug") {
			return "device_del", err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, c.opts.UnplugTimeout)
	defer cancel()
	if err := c.wait(wctx, w); err != nil {
		return "DEVICE_DELETED", fmt.Errorf("no DEVICE_DELETED for %s: %w", id, err)
	}
	return "", nil
}

// Detach hot-unplugs device id (attached by Attach or cold-plugged with
// QEMUArgs):
//
//  1. qom-get the device's chardev (a device without one is not a
//     vhost-user device, and is refused with nothing changed);
//  2. device_del, then wait for DEVICE_DELETED for id: the guest must
//     release the device first (a PCIe hot-unplug takes the guest about
//     5 s; a guest that is not running never does);
//  3. chardev-remove the chardev, which closes QEMU's vhost-user
//     connection to vstellard.
//
// If the device is already gone but its chardev ID-chr is left (an
// earlier Detach gave up waiting), Detach removes the chardev. Events
// are watched before device_del is sent.
func (c *Client) Detach(ctx context.Context, id string) (Detached, error) {
	if err := ValidateID("device id", id); err != nil {
		return Detached{}, fmt.Errorf("detach: %w", err)
	}
	c.ops.Lock()
	defer c.ops.Unlock()
	d := Detached{ID: id}
	stepErr := func(step string, err error, hint string) (Detached, error) {
		return Detached{}, &StepError{Op: "detach", ID: id, Step: step, Err: err, Hint: hint}
	}
	ret, err := c.execute(ctx, "qom-get", map[string]any{"path": peripheral(id), "property": "chardev"})
	if qmpClass(err) == "DeviceNotFound" {
		chr := ChardevID(id)
		if _, rerr := c.execute(ctx, "chardev-remove", map[string]any{"id": chr}); rerr == nil {
			d.Chardev, d.Note = chr, "the device was already gone; removed its leftover chardev"
			c.log.Info("leftover chardev removed", "id", id, "chardev", chr)
			return d, nil
		} else if !notFound(rerr) {
			return stepErr("chardev-remove", rerr, "the device is gone but its chardev is not")
		}
		return stepErr("qom-get chardev", err, "QEMU has no device with this id")
	}
	if err != nil {
		if qmpClass(err) != "" {
			return stepErr("qom-get chardev", err, "not a vhost-user device; nothing was changed")
		}
		return stepErr("qom-get chardev", err, "")
	}
	if err := json.Unmarshal(ret, &d.Chardev); err != nil {
		return stepErr("qom-get chardev", fmt.Errorf("%w: chardev is %s, not a string", ErrProtocol, ret), "")
	}
	if step, err := c.unplug(ctx, id); err != nil {
		hint := ""
		if step == "DEVICE_DELETED" {
			hint = "the guest has not released the device (a guest that is not running never does); " +
				"the chardev is kept: detach again to keep waiting"
		}
		return stepErr(step, err, hint)
	}
	c.log.Info("device deleted", "id", id)
	if d.Chardev != "" {
		if _, err := c.execute(ctx, "chardev-remove", map[string]any{"id": d.Chardev}); err != nil {
			return stepErr("chardev-remove", err, "the device is gone but its chardev is not: detach again")
		}
	}
	return d, nil
}

// Chardev is one chardev from query-chardev.
type Chardev struct {
	Label        string `json:"label"`
	Filename     string `json:"filename"`
	FrontendOpen bool   `json:"frontend-open"`
}

// Chardevs lists QEMU's chardevs.
func (c *Client) Chardevs(ctx context.Context) ([]Chardev, error) {
	c.ops.Lock()
	defer c.ops.Unlock()
	return c.chardevs(ctx)
}

func (c *Client) chardevs(ctx context.Context) ([]Chardev, error) {
	ret, err := c.execute(ctx, "query-chardev", nil)
	if err != nil {
		return nil, err
	}
	var l []Chardev
	if err := json.Unmarshal(ret, &l); err != nil {
		return nil, fmt.Errorf("%w: query-chardev: %v", ErrProtocol, err)
	}
	return l, nil
}

// waitConnected polls query-chardev until the chardev id is connected,
// within the client's CommandTimeout and ctx. Called with c.ops held.
func (c *Client) waitConnected(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.CommandTimeout)
	defer cancel()
	for {
		l, err := c.chardevs(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(l, func(ch Chardev) bool { return ch.Label == id })
		if i >= 0 && !strings.HasPrefix(l[i].Filename, "disconnected:") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chardev %s did not connect to its socket: %w", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// peripheral is the QOM path of a device with an id.
func peripheral(id string) string { return "/machine/peripheral/" + id }
