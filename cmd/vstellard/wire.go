package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/device"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio/abi"
)

// newDevice is the daemon's DeviceFactory: a vStellar device model served
// by a vhost-user back-end.
func newDevice(_ context.Context, spec daemon.DeviceSpec, log *slog.Logger) (daemon.Instance, error) {
	limits, err := parseLimits(spec.Limits)
	if err != nil {
		return daemon.Instance{}, err
	}
	dev, err := device.New(device.Config{Name: spec.Name, Limits: limits}, log)
	if errors.Is(err, abi.ErrBadValue) {
		// Limits out of range: the operator's error (HTTP 400).
		return daemon.Instance{}, fmt.Errorf("%w: %w", daemon.ErrInvalid, err)
	}
	if err != nil {
		return daemon.Instance{}, err
	}
	be := vhost.NewBackend(dev, vhost.Options{Name: spec.Name, Logger: log})
	return daemon.Instance{Backend: be, Device: dev}, nil
}
