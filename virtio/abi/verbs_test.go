package abi

import (
	"errors"
	"testing"
)

// The verbs enumerations are the ibv_* values (docs/spec.md); these pin
// them so a renumbering fails here before it breaks a guest.
func TestVerbsValues(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"QPTypeRC", uint64(QPTypeRC), 2}, {"QPTypeUD", uint64(QPTypeUD), 4},
		{"MTU256", uint64(MTU256), 1}, {"MTU4096", uint64(MTU4096), 5},
		{"PortDown", uint64(PortDown), 1}, {"PortActive", uint64(PortActive), 4},
		{"LinkLayerEthernet", uint64(LinkLayerEthernet), 2},
		{"WRRDMAWrite", uint64(WRRDMAWrite), 0}, {"WRRDMAWriteWithImm", uint64(WRRDMAWriteWithImm), 1},
		{"WRSend", uint64(WRSend), 2}, {"WRSendWithImm", uint64(WRSendWithImm), 3},
		{"WRRDMARead", uint64(WRRDMARead), 4}, {"WRAtomicCmpSwap", uint64(WRAtomicCmpSwap), 5},
		{"WRAtomicFetchAdd", uint64(WRAtomicFetchAdd), 6},
		{"WCSend", uint64(WCSend), 0}, {"WCRDMAWrite", uint64(WCRDMAWrite), 1}, {"WCRDMARead", uint64(WCRDMARead), 2},
		{"WCCompSwap", uint64(WCCompSwap), 3}, {"WCFetchAdd", uint64(WCFetchAdd), 4},
		{"WCRecv", uint64(WCRecv), 128}, {"WCRecvRDMAWithImm", uint64(WCRecvRDMAWithImm), 129},
		{"WCSuccess", uint64(WCSuccess), 0}, {"WCLocLenErr", uint64(WCLocLenErr), 1},
		{"WCLocQPOpErr", uint64(WCLocQPOpErr), 2}, {"WCLocProtErr", uint64(WCLocProtErr), 4},
		{"WCWRFlushErr", uint64(WCWRFlushErr), 5}, {"WCBadRespErr", uint64(WCBadRespErr), 7},
		{"WCLocAccessErr", uint64(WCLocAccessErr), 8}, {"WCRemInvReqErr", uint64(WCRemInvReqErr), 9},
		{"WCRemAccessErr", uint64(WCRemAccessErr), 10}, {"WCRemOpErr", uint64(WCRemOpErr), 11},
		{"WCRetryExcErr", uint64(WCRetryExcErr), 12}, {"WCRNRRetryExcErr", uint64(WCRNRRetryExcErr), 13},
		{"WCFatalErr", uint64(WCFatalErr), 19}, {"WCGeneralErr", uint64(WCGeneralErr), 21},
		{"SendFence", uint64(SendFence), 1}, {"SendSignaled", uint64(SendSignaled), 2},
		{"SendSolicited", uint64(SendSolicited), 4}, {"SendInline", uint64(SendInline), 8},
		{"WCWithImm", uint64(WCWithImm), 2},
		{"QPStateErr", uint64(QPStateErr), 6},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestMTU(t *testing.T) {
	for m, want := range map[MTU]uint32{0: 0, MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 6: 0, 0xffffffff: 0} {
		if got := m.Bytes(); got != want || m.Valid() != (want != 0) {
			t.Errorf("MTU %d: %d bytes, valid %v", uint32(m), got, m.Valid())
		}
	}
}

func TestWROpcodes(t *testing.T) {
	for op := WROpcode(0); op < 10; op++ {
		if op.Valid() != (op <= WRAtomicFetchAdd) {
			t.Errorf("%v valid = %v", op, op.Valid())
		}
		if op.IsAtomic() != (op == WRAtomicCmpSwap || op == WRAtomicFetchAdd) {
			t.Errorf("%v atomic = %v", op, op.IsAtomic())
		}
		if op.HasImm() != (op == WRSendWithImm || op == WRRDMAWriteWithImm) {
			t.Errorf("%v imm = %v", op, op.HasImm())
		}
	}
	for op, want := range map[WROpcode]WCOpcode{
		WRRDMAWrite: WCRDMAWrite, WRRDMAWriteWithImm: WCRDMAWrite, WRSend: WCSend, WRSendWithImm: WCSend,
		WRRDMARead: WCRDMARead, WRAtomicCmpSwap: WCCompSwap, WRAtomicFetchAdd: WCFetchAdd,
		WROpcode(7): WCSend, WROpcode(0xff): WCSend, // undefined: completed with an error as a SEND
	} {
		if got := WCOpcodeFor(op); got != want {
			t.Errorf("WCOpcodeFor(%v) = %v, want %v", op, got, want)
		}
	}
	if WRSend.String() != "SEND" || WROpcode(7).String() != "WROpcode(7)" {
		t.Errorf("names %q %q", WRSend, WROpcode(7))
	}
}

func TestWCStatusNames(t *testing.T) {
	if WCRemAccessErr.String() != "REM_ACCESS_ERR" || WCStatus(3).String() != "WCStatus(3)" {
		t.Errorf("names %q %q", WCRemAccessErr, WCStatus(3))
	}
	var err error = WCWRFlushErr
	if !errors.Is(err, WCWRFlushErr) || err.Error() != "work completion WR_FLUSH_ERR" {
		t.Errorf("WCStatus as error: %v", err)
	}
	if WCRecv.String() != "RECV" || WCOpcode(77).String() != "WCOpcode(77)" {
		t.Errorf("wc opcode names")
	}
}

func TestRNRTimer(t *testing.T) {
	// The IB table: 0 is the longest (655.36 ms), 1 the shortest (10 us),
	// then increasing.
	r := RNRTimerMicros
	if r[0] != 655360 || r[1] != 10 || r[14] != 1280 || r[31] != 491520 {
		t.Errorf("RNR timer table %v", r)
	}
	for i := 2; i < len(r); i++ {
		if r[i] <= r[i-1] {
			t.Errorf("RNR timer %d (%d us) not above %d (%d us)", i, r[i], i-1, r[i-1])
		}
	}
}

func TestAccessString(t *testing.T) {
	for a, want := range map[Access]string{
		0:                                   "local_read",
		AccessLocalWrite | AccessRemoteRead: "local_write|remote_read",
		AccessAll:                           "local_write|remote_write|remote_read|remote_atomic",
		AccessRemoteAtomic | Access(1<<9):   "remote_atomic|0x200",
	} {
		if got := a.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint32(a), got, want)
		}
	}
}
