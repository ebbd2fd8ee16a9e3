package vhost

import (
	"context"
	"fmt"

	"github.com/vstellar/vstellar/virtio"
)

// Handlers for features, ownership, status, reset and config space.

func wantEmpty(m *Message) error {
	if len(m.Payload) != 0 {
		return badPayload("%d unexpected bytes", len(m.Payload))
	}
	return nil
}

func (s *session) offeredFeatures() uint64 { return s.dev.Features() | FeatureProtocolFeatures }

func (s *session) getFeatures(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	return encodeU64(s.offeredFeatures()), nil
}

func (s *session) setFeatures(m *Message) ([]byte, error) {
	f, err := decodeU64(m.Payload)
	if err != nil {
		return nil, err
	}
	if extra := f &^ s.offeredFeatures(); extra != 0 {
		return nil, fmt.Errorf("features %#x were not offered", extra)
	}
	if s.active.Load() && f != s.features {
		return nil, fmt.Errorf("features cannot change while the device is active")
	}
	s.features, s.featuresSet = f, true
	// Without VHOST_USER_F_PROTOCOL_FEATURES there is no SET_VRING_ENABLE:
	// rings are enabled as soon as they start.
	if f&FeatureProtocolFeatures == 0 {
		for _, r := range s.rings {
			r.setEnabled(true)
		}
	}
	return nil, nil
}

func (s *session) setOwner(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	s.owned = true
	return nil, nil
}

// resetOwner: the spec deprecates RESET_OWNER and lets back-ends "ignore,
// or disable all rings". We stop them, which is the safe reading.
func (s *session) resetOwner(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	s.stopAllRings()
	s.deactivate(false)
	s.owned = false
	return nil, nil
}

func (s *session) getProtocolFeatures(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	return encodeU64(s.b.protocolFeatures()), nil
}

func (s *session) setProtocolFeatures(m *Message) ([]byte, error) {
	f, err := decodeU64(m.Payload)
	if err != nil {
		return nil, err
	}
	if extra := f &^ s.b.protocolFeatures(); extra != 0 {
		return nil, fmt.Errorf("protocol features %#x were not offered", extra)
	}
	s.proto.Store(f)
	return nil, nil
}

func (s *session) getQueueNum(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	return encodeU64(uint64(s.dev.NumQueues())), nil
}

func (s *session) getMaxMemSlots(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	return encodeU64(s.b.opts.MaxMemSlots), nil
}

func (s *session) getStatus(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	return encodeU64(uint64(s.status)), nil
}

// setStatus follows the driver's status. DRIVER_OK activates the device
// (activation.go). Status 0, which a front-end that sends status at all
// sends on a stop (a guest reset or a VM pause alike), suspends the
// device; its state is dropped by RESET_DEVICE, by the driver itself, or
// when a new driver starts the rings (activation.go).
func (s *session) setStatus(m *Message) ([]byte, error) {
	v, err := decodeU64(m.Payload)
	if err != nil {
		return nil, err
	}
	if v > 0xff {
		return nil, badPayload("status %#x", v)
	}
	st := virtio.Status(v)
	if st&virtio.StatusFeaturesOK != 0 && !s.featuresSet {
		return nil, fmt.Errorf("FEATURES_OK before SET_FEATURES")
	}
	s.statusMu.Lock()
	needsReset := s.status & virtio.StatusDeviceNeedsReset
	s.status = st | needsReset
	s.statusMu.Unlock()
	switch {
	case st == 0:
		s.statusMu.Lock()
		s.status = 0
		s.statusMu.Unlock()
		s.stopAllRings()
		s.deactivate(false)
		s.forgetRings()
	case st&virtio.StatusDriverOK != 0:
		s.after(s.startActivation)
	}
	return nil, nil
}

func (s *session) resetDevice(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	s.stopAllRings()
	s.deactivate(true)
	s.b.used.Store(false)
	s.forgetRings()
	s.statusMu.Lock()
	s.status = 0
	s.statusMu.Unlock()
	return nil, nil
}

func (s *session) markNeedsReset() {
	s.statusMu.Lock()
	s.status |= virtio.StatusDeviceNeedsReset
	s.statusMu.Unlock()
}

func (s *session) checkConfigRange(c ConfigMsg) error {
	end := uint64(c.Offset) + uint64(c.Size)
	if end > uint64(s.dev.ConfigSize()) {
		return badPayload("config range [%d, %d) outside %d-byte config space", c.Offset, end, s.dev.ConfigSize())
	}
	return nil
}

func (s *session) getConfig(m *Message) ([]byte, error) {
	c, err := decodeConfigMsg(m.Payload)
	if err != nil {
		return nil, err
	}
	if err := s.checkConfigRange(c); err != nil {
		return nil, err
	}
	out := ConfigMsg{Offset: c.Offset, Flags: c.Flags, Data: make([]byte, c.Size)}
	s.dev.ReadConfig(c.Offset, out.Data)
	return out.encode(), nil
}

func (s *session) setConfig(m *Message) ([]byte, error) {
	c, err := decodeConfigMsg(m.Payload)
	if err != nil {
		return nil, err
	}
	if err := s.checkConfigRange(c); err != nil {
		return nil, err
	}
	return nil, s.dev.WriteConfig(c.Offset, c.Data)
}

func (s *session) getShmemConfig(m *Message) ([]byte, error) {
	if err := wantEmpty(m); err != nil {
		return nil, err
	}
	sizes := s.dev.ShmemRegions()
	if len(sizes) > maxShmemRegions {
		return nil, fmt.Errorf("device has %d shared memory regions, at most %d", len(sizes), maxShmemRegions)
	}
	return encodeShmemConfig(sizes), nil
}

func (s *session) sendConfigChange(ctx context.Context) error {
	ch := s.channel.Load()
	if ch == nil {
		return fmt.Errorf("config change: no back-end channel: %w", ErrNotNegotiated)
	}
	if !s.hasProto(ProtoConfig) {
		return fmt.Errorf("config change: %w", notNegotiated(ProtoConfig))
	}
	return ch.request(ctx, BackendConfigChangeMsg, nil, -1, s.hasProto(ProtoReplyAck))
}
