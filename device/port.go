package device

import "github.com/vstellar/vstellar/virtio/abi"

// Port attributes. The one port is always up: the fabric below it is the
// daemon's, and a guest has no cable to pull.
const (
	portNum = 1
	// maxMsgSize is the largest message a QP carries (IB's 2^31).
	maxMsgSize = 1 << 31
	// physStateLinkUp is IB's PortPhysicalState LinkUp.
	physStateLinkUp = 5
	// activeWidth4X and activeSpeedEDR report a 100 Gb/s link (4x EDR)
	// in IB's encoding; the multipath transport below is what really
	// sets the speed.
	activeWidth4X  = 2
	activeSpeedEDR = 32
)

// checkPort checks a port number from a request: only port 1 exists.
func checkPort(port uint32) error {
	if port != portNum {
		return fail(abi.StatusInvalidArgument, "port %d (the device has port 1 only)", port)
	}
	return nil
}

// queryPort answers QUERY_PORT.
func (d *Device) queryPort(c *cmd, payload []byte) ([]byte, error) {
	var r abi.QueryPortReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := checkPort(r.Port); err != nil {
		return nil, err
	}
	return c.encode(&abi.PortAttr{
		State:        abi.PortActive,
		MaxMTU:       abi.MTU4096,
		ActiveMTU:    abi.MTU4096,
		GIDTableLen:  d.limits.MaxGID,
		MaxMsgSize:   maxMsgSize,
		PKeyTableLen: 1,
		ActiveWidth:  activeWidth4X,
		ActiveSpeed:  activeSpeedEDR,
		PhysState:    physStateLinkUp,
		LinkLayer:    abi.LinkLayerEthernet,
	}), nil
}
