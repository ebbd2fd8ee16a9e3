package abi

import "testing"

func TestDoorbellRecordOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"device page engine_flags", DevPageOffEngineFlags, 0x00},
		{"device page wakeups", DevPageOffWakeups, 0x08},
		{"qp sq_prod", QPDoorbellOffSQProd, 0x00},
		{"qp rq_prod", QPDoorbellOffRQProd, 0x04},
		{"qp sq_cons", QPDoorbellOffSQCons, 0x08},
		{"qp rq_cons", QPDoorbellOffRQCons, 0x0c},
		{"cq prod", CQDoorbellOffProd, 0x00},
		{"cq cons", CQDoorbellOffCons, 0x04},
		{"cq arm", CQDoorbellOffArm, 0x08},
		{"cq arm_ack", CQDoorbellOffArmAck, 0x0c},
		{"record size", DoorbellRecordSize, 64},
		{"shmid", DoorbellShmID, 0},
		{"min page", DoorbellMinPageSize, 4096},
	} {
		if c.got != c.want {
			t.Errorf("%s at %#x, want %#x", c.name, c.got, c.want)
		}
		// Every word is 4-byte aligned (atomic access) inside its record
		// (or, for the device page, inside the first page).
		if c.got%4 != 0 {
			t.Errorf("%s at %#x is not aligned", c.name, c.got)
		}
	}
	if QPDoorbellOffRQCons+4 > DoorbellRecordSize || CQDoorbellOffArmAck+4 > DoorbellRecordSize {
		t.Error("record fields overflow the record")
	}
	if DevPageOffWakeups%8 != 0 || DevPageOffWakeups+8 > DoorbellMinPageSize {
		t.Error("wakeups counter is not an aligned le64 in the device page")
	}
	if EngineIdle != 1 {
		t.Errorf("EngineIdle = %#x, want bit 0", EngineIdle)
	}
}

func TestCQArmWord(t *testing.T) {
	if CQArmNextComp != 1 || CQArmSolicited != 2 {
		t.Fatalf("arm flags %d %d", CQArmNextComp, CQArmSolicited)
	}
	// The encoding is arm_sn<<2 | flags.
	if w := CQArmWord(5, CQArmSolicited); w != 5<<2|2 {
		t.Errorf("CQArmWord(5, SOLICITED) = %#x", w)
	}
	for _, sn := range []uint32{0, 1, 2, 0x1234567, 1<<30 - 1} {
		for _, fl := range []uint32{0, CQArmNextComp, CQArmSolicited, CQArmNextComp | CQArmSolicited} {
			gotSN, gotFl := SplitCQArmWord(CQArmWord(sn, fl))
			if gotSN != sn || gotFl != fl {
				t.Errorf("CQArmWord(%#x, %d) splits into %#x, %d", sn, fl, gotSN, gotFl)
			}
		}
	}
	// Flags outside the two arm bits cannot leak into the sequence
	// number, and the sequence number is 30 bits: it wraps.
	if w := CQArmWord(1, 0xffffffff); w != 1<<2|3 {
		t.Errorf("undefined flags leaked: %#x", w)
	}
	if sn, _ := SplitCQArmWord(CQArmWord(1<<30, CQArmNextComp)); sn != 0 {
		t.Errorf("sn 2^30 became %#x, want 0 (30-bit wrap)", sn)
	}
	if sn, fl := SplitCQArmWord(0xffffffff); sn != 1<<30-1 || fl != 3 {
		t.Errorf("split all-ones: %#x %d", sn, fl)
	}
}

// TestDoorbellNumbering checks the numbering convention of the spec
// against a layout: QPN q (2..max_qp+1) has record q-2, CQN c
// (1..max_cq) has record max_qp+c-1 and SRQN s (1..max_srq) has record
// max_qp+max_cq+s-1, and all of them exist and are distinct.
func TestDoorbellNumbering(t *testing.T) {
	l := DefaultLimits
	l.MaxQP, l.MaxCQ = 100, 50
	d, err := NewDoorbellLayout(l, 4096)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for qpn := uint32(2); qpn <= l.MaxQP+1; qpn++ {
		off, ok := d.RecordOffset(qpn - 2)
		if !ok || seen[off] || off < uint64(d.RecordsOffset) {
			t.Fatalf("qpn %d: record offset %d %v", qpn, off, ok)
		}
		seen[off] = true
	}
	for cqn := uint32(1); cqn <= l.MaxCQ; cqn++ {
		off, ok := d.RecordOffset(l.MaxQP + cqn - 1)
		if !ok || seen[off] || off+DoorbellRecordSize > d.Size() {
			t.Fatalf("cqn %d: record offset %d %v", cqn, off, ok)
		}
		seen[off] = true
	}
	for srqn := uint32(1); srqn <= l.MaxSRQ; srqn++ {
		off, ok := d.RecordOffset(l.MaxQP + l.MaxCQ + srqn - 1)
		if !ok || seen[off] || off+DoorbellRecordSize > d.Size() {
			t.Fatalf("srqn %d: record offset %d %v", srqn, off, ok)
		}
		seen[off] = true
	}
	if _, ok := d.RecordOffset(l.MaxQP + l.MaxCQ + l.MaxSRQ); ok {
		t.Error("a record past the last SRQ's exists")
	}
}
