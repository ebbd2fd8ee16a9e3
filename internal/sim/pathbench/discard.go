package pathbench

import (
	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// discard is the sink of a flow's sending end: nothing is sent to it but
// ACKs, so any message is refused.
type discard struct{}

func (discard) Begin(*transport.Inbound) (wire.NAK, uint8)    { return wire.NAKInvalid, 0 }
func (discard) Place(*transport.Inbound, uint64, []byte) bool { return false }
func (discard) Commit(*transport.Inbound) wire.NAK            { return wire.NAKInvalid }
