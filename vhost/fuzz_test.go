package vhost

import (
	"context"
	"encoding/binary"
	"testing"
	"time"
)

// FuzzDispatch feeds arbitrary bytes to a backend as a front-end's message
// stream. Whatever arrives, Serve must neither panic nor hang: it answers
// or ends the connection, and returns once the stream ends.
func FuzzDispatch(f *testing.F) {
	msg := func(req, flags uint32, payload []byte) []byte {
		b := make([]byte, 12, 12+len(payload))
		binary.LittleEndian.PutUint32(b, req)
		binary.LittleEndian.PutUint32(b[4:], flags)
		binary.LittleEndian.PutUint32(b[8:], uint32(len(payload)))
		return append(b, payload...)
	}
	cat := func(ms ...[]byte) []byte {
		var out []byte
		for _, m := range ms {
			out = append(out, m...)
		}
		return out
	}
	handshake := cat(
		msg(uint32(ReqGetFeatures), vFlag, nil),
		msg(uint32(ReqGetProtocolFeatures), vFlag, nil),
		msg(uint32(ReqSetProtocolFeatures), vFlag, u64(SupportedProtocolFeatures)),
		msg(uint32(ReqGetQueueNum), vFlag, nil),
		msg(uint32(ReqGetMaxMemSlots), vFlag, nil),
		msg(uint32(ReqSetOwner), vFlag|needReply, nil),
		msg(uint32(ReqGetShmemConfig), vFlag, nil),
	)
	f.Add(handshake)
	f.Add(cat(handshake,
		msg(uint32(ReqSetFeatures), vFlag|needReply, u64(1<<32|1<<30)),
		msg(uint32(ReqSetStatus), vFlag|needReply, u64(11)),
		msg(uint32(ReqSetVringNum), vFlag|needReply, state(0, 8)),
		msg(uint32(ReqSetVringBase), vFlag|needReply, state(0, 3)),
		msg(uint32(ReqSetVringAddr), vFlag|needReply, vringAddr(0, 0x1000, 0x2000, 0x3000)),
		msg(uint32(ReqGetVringBase), vFlag, state(0, 0)),
		msg(uint32(ReqSetVringKick), vFlag|needReply, u64(0x100)),
		msg(uint32(ReqSetVringEnable), vFlag|needReply, state(1, 1)),
		msg(uint32(ReqSetStatus), vFlag|needReply, u64(15)),
		msg(uint32(ReqGetStatus), vFlag, nil),
		msg(uint32(ReqResetDevice), vFlag|needReply, nil),
	))
	f.Add(cat(handshake,
		msg(uint32(ReqGetConfig), vFlag, append(state(0, 16), make([]byte, 20)...)),
		msg(uint32(ReqSetConfig), vFlag|needReply, append(state(4, 2), 0, 0, 0, 0, 1, 2)),
		msg(uint32(ReqGetInflightFD), vFlag, make([]byte, 24)),
		msg(uint32(ReqRemMemReg), vFlag|needReply, singleRegion([4]uint64{0, 4096, 0, 0})),
		msg(uint32(ReqSetMemTable), vFlag|needReply, memTable([4]uint64{0, 4096, 0, 0})),
		msg(999, vFlag|needReply, []byte{1, 2}),
		msg(uint32(ReqCheckDeviceState), vFlag, nil),
	))
	f.Add(msg(uint32(ReqSetFeatures), vFlag, []byte{1, 2, 3}))
	f.Add(msg(uint32(ReqGetFeatures), 0x2, nil))
	f.Add(msg(uint32(ReqSetOwner), vFlag, make([]byte, 5000))[:100])
	f.Add([]byte{1, 0, 0, 0, 1})

	f.Fuzz(func(t *testing.T, stream []byte) {
		b := NewBackend(newEchoDevice(t), Options{})
		fe, be := socketPair(t)
		done := make(chan error, 1)
		go func() { done <- b.Serve(context.Background(), be) }()
		// Drain replies so the backend never blocks on a full socket.
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := fe.Read(buf); err != nil {
					return
				}
			}
		}()
		fe.Write(stream)
		fe.CloseWrite()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return after the stream ended")
		}
		fe.Close()
	})
}
