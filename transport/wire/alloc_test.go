package wire

import "testing"

func TestParseDoesNotAllocate(t *testing.T) {
	bad := raw(t, "SEND", func(b []byte) []byte { b[2] = 9; return b })
	for _, s := range append(samples(), sample{name: "bad version"}) {
		b := bad
		if s.name != "bad version" {
			b = s.encode(nil)
		}
		var p Packet
		if n := testing.AllocsPerRun(100, func() { _ = Parse(b, &p) }); n != 0 {
			t.Errorf("%s: Parse allocates %v times", s.name, n)
		}
	}
}

func TestAppendDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 2048)
	for _, s := range samples() {
		h, d, a := s.h, s.d, s.a
		var n float64
		if s.h.Type == TypeAck {
			n = testing.AllocsPerRun(100, func() { buf = AppendAck(buf[:0], &h, &a) })
		} else {
			n = testing.AllocsPerRun(100, func() { buf = AppendData(buf[:0], &h, &d, s.payload) })
		}
		if n != 0 {
			t.Errorf("%s: encoder allocates %v times with room in dst", s.name, n)
		}
	}
}

func BenchmarkParseData(b *testing.B) {
	h := hdr(FlagLast)
	d := Data{Op: OpWrite, MsgLen: 1 << 20, Offset: 1<<20 - 1392, RKey: 7, RAddr: 1 << 30}
	pkt := AppendData(nil, &h, &d, make([]byte, 1392)) // a full 1500-MTU packet
	var p Packet
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(pkt, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseAck(b *testing.B) {
	s := sampleNamed(b, "ACK RNR")
	pkt := s.encode(nil)
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(pkt, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendData(b *testing.B) {
	h := hdr(FlagLast)
	d := Data{Op: OpWrite, MsgLen: 1 << 20, Offset: 1<<20 - 1392, RKey: 7, RAddr: 1 << 30}
	payload := make([]byte, 1392)
	buf := make([]byte, 0, 1500)
	b.SetBytes(int64(HeaderLen + DataLen + len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendData(buf[:0], &h, &d, payload)
	}
}

func BenchmarkAppendAck(b *testing.B) {
	s := sampleNamed(b, "ACK RNR")
	h, a := s.h, s.a
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendAck(buf[:0], &h, &a)
	}
}
