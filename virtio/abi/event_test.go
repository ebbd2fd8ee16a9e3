package abi

import (
	"bytes"
	"errors"
	"testing"
)

func TestEventLayout(t *testing.T) {
	e := Event{Type: 0x01020304, Handle: 0x05060708, Info: 0x090a0b0c, Dropped: 0x0d0e0f10}
	want := expect(16, []field{{0, 4, 0x01020304}, {4, 4, 0x05060708}, {8, 4, 0x090a0b0c}, {12, 4, 0x0d0e0f10}})
	b := bytes.Repeat([]byte{0xff}, 17)
	e.Put(b)
	if !bytes.Equal(b[:16], want) || b[16] != 0xff {
		t.Fatalf("event encoding %x, want %x", b, want)
	}
	got, err := DecodeEvent(b)
	if err != nil || got != e {
		t.Fatalf("round trip %+v %v", got, err)
	}
	for _, n := range []int{0, 1, 15} {
		if _, err := DecodeEvent(make([]byte, n)); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("%d-byte event: %v", n, err)
		}
	}
}

func TestEventTypes(t *testing.T) {
	// Values are ABI: docs/spec.md lists them.
	want := map[EventType]string{
		1: "CQ_COMP", 2: "CQ_ERR", 3: "QP_FATAL", 4: "QP_REQ_ERR", 5: "QP_ACCESS_ERR",
		6: "SQ_DRAINED", 7: "PORT_ACTIVE", 8: "PORT_ERR", 9: "GID_CHANGE", 10: "DEVICE_FATAL",
		11: "SRQ_LIMIT", 12: "SRQ_ERR", 13: "QP_LAST_WQE",
	}
	for typ, name := range want {
		if typ.String() != name {
			t.Errorf("event %d is %q, want %q", uint32(typ), typ, name)
		}
	}
	if len(eventNames) != len(want) {
		t.Errorf("%d event types, the spec lists %d", len(eventNames), len(want))
	}
	if EventType(0).String() != "EventType(0)" || EventType(14).String() != "EventType(14)" {
		t.Errorf("unknown event names")
	}
}
