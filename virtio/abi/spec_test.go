package abi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The tests in this file hold docs/spec.md to the code: every layout table
// of the specification must tile its structure exactly, and every row must
// be a field of the Go definition at the offset and size the encoder
// really uses. The field positions are not written down here; they are
// found by setting one field at a time and watching which bytes of the
// encoding change, so the test follows the code, not a second copy of the
// layout.

const specPath = "../../docs/spec.md"

func readSpec(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatalf("reading the specification: %v", err)
	}
	return strings.Split(string(b), "\n")
}

// docRow is one row of a layout table: offset, size (-1 when the size
// column is not a size, as for a trailing "SGEs" row) and field name.
type docRow struct {
	off, size int
	name      string
	line      int
}

var sizeWords = map[string]int{"u8": 1, "le16": 2, "le32": 4, "le64": 8}

// tableAfter returns the rows of the first table after the first line that
// contains marker, and the line of the marker.
func tableAfter(t *testing.T, lines []string, marker string) ([]docRow, string) {
	t.Helper()
	start := -1
	for i, l := range lines {
		if strings.Contains(l, marker) {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("spec: no %q", marker)
	}
	var rows []docRow
	inTable := false
	for i := start + 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			if strings.HasPrefix(l, "#") {
				t.Fatalf("spec: no table after %q", marker)
			}
			continue
		}
		cols := strings.Split(strings.Trim(l, "|"), "|")
		for j := range cols {
			cols[j] = strings.TrimSpace(cols[j])
		}
		if !inTable { // header row, then the separator
			inTable = true
			i++
			continue
		}
		off, err := strconv.ParseUint(strings.TrimPrefix(cols[0], "0x"), 16, 32)
		if err != nil || !strings.HasPrefix(cols[0], "0x") {
			t.Fatalf("spec line %d: offset %q", i+1, cols[0])
		}
		size := -1
		if n, ok := sizeWords[cols[1]]; ok {
			size = n
		} else if n, err := strconv.Atoi(cols[1]); err == nil {
			size = n
		}
		name := ""
		if len(cols) > 2 {
			name = cols[2]
		}
		rows = append(rows, docRow{int(off), size, name, i + 1})
	}
	return rows, lines[start]
}

// span is a field's position in an encoding.
type span struct{ off, size int }

// fieldSpans finds the position of every field of *v (at every nesting
// level) by setting it to all ones and diffing encode's output against
// the zero value's. leaves holds the innermost fields only, with whether
// the Go field is a reserved one.
func fieldSpans(t *testing.T, v any, encode func(any) []byte) (all map[span]string, leaves map[span]bool) {
	t.Helper()
	base := encode(v)
	all, leaves = map[span]string{}, map[span]bool{}
	var walk func(rv reflect.Value, path string)
	walk = func(rv reflect.Value, path string) {
		for i := 0; i < rv.NumField(); i++ {
			f := rv.Field(i)
			name := path + rv.Type().Field(i).Name
			old := reflect.New(f.Type()).Elem()
			old.Set(f)
			setOnes(f)
			sp, ok := diff(base, encode(v))
			f.Set(old)
			if !ok {
				t.Fatalf("%T.%s does not show in the encoding", v, name)
			}
			all[sp] = name
			if f.Kind() == reflect.Struct {
				walk(f, name+".")
				continue
			}
			leaves[sp] = strings.HasPrefix(rv.Type().Field(i).Name, "Reserved")
		}
	}
	walk(reflect.ValueOf(v).Elem(), "")
	return all, leaves
}

func setOnes(f reflect.Value) {
	switch f.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		f.SetUint(^uint64(0))
	case reflect.Array:
		for i := 0; i < f.Len(); i++ {
			setOnes(f.Index(i))
		}
	case reflect.Struct:
		for i := 0; i < f.NumField(); i++ {
			setOnes(f.Field(i))
		}
	default:
		panic(fmt.Sprintf("field kind %v", f.Kind()))
	}
}

// diff returns the range of bytes that differ.
func diff(a, b []byte) (span, bool) {
	lo, hi := -1, -1
	for i := range a {
		if a[i] != b[i] {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	return span{lo, hi - lo + 1}, lo >= 0
}

func encodePayloadOf(v any) []byte { return EncodePayload(nil, v) }

func putter[T interface{ Put([]byte) }](n int) func(any) []byte {
	return func(v any) []byte {
		b := make([]byte, n)
		(*v.(*T)).Put(b)
		return b
	}
}

func marshaller(v any) []byte {
	b, err := v.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

// TestSpecLayouts checks every layout table of docs/spec.md against the
// encoder of its structure.
func TestSpecLayouts(t *testing.T) {
	lines := readSpec(t)
	for _, c := range []struct {
		marker string
		v      any
		encode func(any) []byte
		size   int // encoded size the table must tile
	}{
		{"Request **QueryPortReq**", new(QueryPortReq), encodePayloadOf, 8},
		{"Response **PortAttr**", new(PortAttr), encodePayloadOf, 48},
		{"Request **GIDReq**", new(GIDReq), encodePayloadOf, 8},
		{"Response **GIDEntry**", new(GIDEntry), encodePayloadOf, 32},
		{"Request **AddGIDReq**", new(AddGIDReq), encodePayloadOf, 24},
		{"Request **CreateCQReq**", new(CreateCQReq), encodePayloadOf, 16},
		{"Response **CreateCQResp**", new(CreateCQResp), encodePayloadOf, 8},
		{"Request **ResizeCQReq**", new(ResizeCQReq), encodePayloadOf, 16},
		{"Request **CreateQPReq**", new(CreateQPReq), encodePayloadOf, 56},
		{"Response **CreateQPResp**", new(CreateQPResp), encodePayloadOf, 16},
		{"Request **ModifyQPReq**", new(ModifyQPReq), encodePayloadOf, 88},
		{"**QPAttr** (80 bytes)", new(QPAttr), encodePayloadOf, 80},
		{"**QPCap** (40 bytes)", new(QPCap), encodePayloadOf, 40},
		{"**QueryQPResp** (120 bytes)", new(QueryQPResp), encodePayloadOf, 120},
		{"Request **RegMRReq**", new(RegMRReq), encodePayloadOf, 40},
		{"Response **RegMRResp**", new(RegMRResp), encodePayloadOf, 8},
		{"Request **CreateAHReq**", new(CreateAHReq), encodePayloadOf, 40},
		{"Request **SetDoorbellAreaReq**", new(SetDoorbellAreaReq), encodePayloadOf, 16},
		{"**HandleReq** (8 bytes)", new(HandleReq), encodePayloadOf, 8},
		{"**HandleResp** (8 bytes)", new(HandleResp), encodePayloadOf, 8},
		{"**AHAttr** (32 bytes)", new(AHAttr), encodePayloadOf, 32},
		{"**DeviceAttr** (160 bytes)", new(DeviceAttr), marshaller, DeviceAttrSize},
		{"## 5. Configuration space", new(Config), marshaller, ConfigSize},
		{"### 10.1 SGE", new(SGE), putter[SGE](SGESize), SGESize},
		{"### 10.2 Send WQE", new(SendWQE), putter[SendWQE](SendWQEHeaderSize), SendWQEHeaderSize},
		{"### 10.3 Receive WQE", new(RecvWQE), putter[RecvWQE](RecvWQEHeaderSize), RecvWQEHeaderSize},
		{"### 10.4 CQE", new(CQE), putter[CQE](CQESize), CQESize},
		{"### 11.1 Event record", new(Event), putter[Event](EventSize), EventSize},
	} {
		t.Run(c.marker, func(t *testing.T) {
			rows, head := tableAfter(t, lines, c.marker)
			if m := regexp.MustCompile(`\((\d+) bytes\)`).FindStringSubmatch(head); m != nil {
				if n, _ := strconv.Atoi(m[1]); n != c.size {
					t.Errorf("heading says %d bytes, the structure has %d", n, c.size)
				}
			}
			if n := len(c.encode(c.v)); n != c.size {
				t.Fatalf("encoding is %d bytes, want %d", n, c.size)
			}
			all, leaves := fieldSpans(t, c.v, c.encode)
			for _, e := range checkTable(rows, all, leaves, c.size) {
				t.Errorf("%T: %s", c.v, e)
			}
		})
	}
}

// checkTable checks that rows tile [0, size) and that each row is a field
// (or a reserved area that hides no field). It returns what is wrong.
func checkTable(rows []docRow, all map[span]string, leaves map[span]bool, size int) (errs []string) {
	errorf := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	next := 0
	for _, r := range rows {
		if r.off != next {
			errorf("spec line %d: %q at %#x, but the previous row ends at %#x", r.line, r.name, r.off, next)
		}
		if r.size < 0 {
			if r.off != size {
				errorf("spec line %d: sizeless row %q at %#x, inside the %d-byte structure", r.line, r.name, r.off, size)
			}
			next = r.off
			break
		}
		next = r.off + r.size
		sp := span{r.off, r.size}
		if strings.Contains(strings.ToLower(r.name), "reserved") {
			for l, res := range leaves {
				if !res && l.off < sp.off+sp.size && sp.off < l.off+l.size {
					errorf("spec line %d: reserved [%#x, +%d) hides field %s", r.line, r.off, r.size, all[l])
				}
			}
			continue
		}
		if _, ok := all[sp]; !ok {
			errorf("spec line %d: %q at %#x (%d bytes) is not a field", r.line, r.name, r.off, r.size)
		}
	}
	if next != size {
		errorf("spec table ends at %#x, the structure at %#x", next, size)
	}
	// Every field the code encodes is in the table (tiling plus the row
	// check above cover it, unless a row is a wider reserved area).
	for l, res := range leaves {
		covered := false
		for _, r := range rows {
			if r.size > 0 && r.off <= l.off && l.off+l.size <= r.off+r.size {
				covered = true
			}
		}
		if !covered && !res {
			errorf("field %s at %#x is missing from the spec table", all[l], l.off)
		}
	}
	return errs
}

// TestSpecDoorbellTables checks the device page and doorbell record tables
// against the offset constants.
func TestSpecDoorbellTables(t *testing.T) {
	lines := readSpec(t)
	for _, c := range []struct {
		marker string
		fields map[string]span
	}{
		{"### 6.3 Device page", map[string]span{"engine_flags": {DevPageOffEngineFlags, 4}, "wakeups": {DevPageOffWakeups, 8}}},
		{"### 6.4 QP doorbell record", map[string]span{
			"sq_prod": {QPDoorbellOffSQProd, 4}, "rq_prod": {QPDoorbellOffRQProd, 4},
			"sq_cons": {QPDoorbellOffSQCons, 4}, "rq_cons": {QPDoorbellOffRQCons, 4},
		}},
		{"### 6.5 CQ doorbell record", map[string]span{
			"prod": {CQDoorbellOffProd, 4}, "cons": {CQDoorbellOffCons, 4},
			"arm": {CQDoorbellOffArm, 4}, "arm_ack": {CQDoorbellOffArmAck, 4},
		}},
	} {
		rows, _ := tableAfter(t, lines, c.marker)
		seen := 0
		next := 0
		for _, r := range rows {
			if r.off != next {
				t.Errorf("%s: spec line %d at %#x, previous row ends at %#x", c.marker, r.line, r.off, next)
			}
			if r.size < 0 {
				break
			}
			next = r.off + r.size
			if want, ok := c.fields[r.name]; ok {
				seen++
				if (span{r.off, r.size}) != want {
					t.Errorf("%s: %s at %#x (%d bytes), code has %#x (%d)", c.marker, r.name, r.off, r.size, want.off, want.size)
				}
			} else if r.name != "reserved" {
				t.Errorf("%s: spec line %d: unknown field %q", c.marker, r.line, r.name)
			}
		}
		if seen != len(c.fields) {
			t.Errorf("%s: %d of %d fields documented", c.marker, seen, len(c.fields))
		}
		if c.marker != "### 6.3 Device page" && next != DoorbellRecordSize {
			t.Errorf("%s: table covers %d bytes, a record is %d", c.marker, next, DoorbellRecordSize)
		}
	}
}

// TestSpecOpcodeTable checks §7.4 against the opcode table the decoder
// enforces.
func TestSpecOpcodeTable(t *testing.T) {
	lines := readSpec(t)
	rows := enumTable(t, lines, "### 7.4 Opcodes")
	if len(rows) != len(Opcodes()) {
		t.Errorf("spec lists %d opcodes, the ABI has %d", len(rows), len(Opcodes()))
	}
	for _, r := range rows {
		op := Opcode(r.value)
		req, _ := op.RequestSize()
		resp, _ := op.ResponseSize()
		if op.String() != r.cols[1] || strconv.Itoa(req) != r.cols[2] || strconv.Itoa(resp) != r.cols[3] {
			t.Errorf("spec line %d: %v, code: %v %d %d", r.line, r.cols, op, req, resp)
		}
	}
}

// TestSpecEnumTables checks the status, event type and feature bit tables.
func TestSpecEnumTables(t *testing.T) {
	lines := readSpec(t)
	rows := enumTable(t, lines, "### 7.2 Status codes")
	if len(rows) != len(statusNames) {
		t.Errorf("spec lists %d statuses, the ABI has %d", len(rows), len(statusNames))
	}
	for _, r := range rows {
		if Status(r.value).String() != r.cols[1] {
			t.Errorf("spec line %d: status %d is %q, code says %v", r.line, r.value, r.cols[1], Status(r.value))
		}
	}
	rows = enumTable(t, lines, "| type | name | handle | emitted when |")
	if len(rows) != len(eventNames) {
		t.Errorf("spec lists %d event types, the ABI has %d", len(rows), len(eventNames))
	}
	for _, r := range rows {
		if EventType(r.value).String() != r.cols[1] {
			t.Errorf("spec line %d: event %d is %q, code says %v", r.line, r.value, r.cols[1], EventType(r.value))
		}
	}
	rows = enumTable(t, lines, "Device-specific bits (0–23)")
	n := 0
	for _, r := range rows {
		if r.value < 0 {
			continue // the "9–23" reserved row
		}
		n++
		if Feature(r.value).String() != r.cols[1] {
			t.Errorf("spec line %d: feature bit %d is %q, code says %v", r.line, r.value, r.cols[1], Feature(r.value))
		}
	}
	if n != len(featureNames) {
		t.Errorf("spec lists %d feature bits, the ABI names %d", n, len(featureNames))
	}
}

type enumRow struct {
	value int
	cols  []string
	line  int
}

// enumTable reads a table whose first column is a decimal value (-1 when
// it is not a number).
func enumTable(t *testing.T, lines []string, marker string) []enumRow {
	t.Helper()
	start := -1
	for i, l := range lines {
		if strings.Contains(l, marker) {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("spec: no %q", marker)
	}
	var rows []enumRow
	header := strings.HasPrefix(strings.TrimSpace(lines[start]), "|")
	inTable := header
	skip := 1 // the separator after the header
	if !header {
		skip = 2
	}
	for i := start + 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		if skip > 0 {
			skip--
			continue
		}
		cols := strings.Split(strings.Trim(l, "|"), "|")
		for j := range cols {
			cols[j] = strings.Trim(strings.TrimSpace(cols[j]), "*")
		}
		v, err := strconv.Atoi(cols[0])
		if err != nil {
			v = -1
		}
		rows = append(rows, enumRow{v, cols, i + 1})
	}
	return rows
}

// TestSpecFieldSpansFindReserved is a check of the checker: a reserved
// area that hides a real field, a row at a wrong offset and a missing
// field are all reported.
func TestSpecFieldSpansFindReserved(t *testing.T) {
	good := []docRow{{0, 8, "ring_addr", 1}, {8, 4, "entries", 2}, {12, 4, "flags", 3}}
	all, leaves := fieldSpans(t, new(CreateCQReq), encodePayloadOf)
	for name, rows := range map[string][]docRow{
		"reserved hides a field": {{0, 8, "ring_addr", 1}, {8, 4, "reserved", 2}, {12, 4, "flags", 3}},
		"wrong offset":           {{0, 8, "ring_addr", 1}, {12, 4, "entries", 2}, {12, 4, "flags", 3}},
		"wrong size":             {{0, 4, "ring_addr", 1}, {4, 4, "x", 2}, {8, 4, "entries", 3}, {12, 4, "flags", 4}},
		"short table":            {{0, 8, "ring_addr", 1}, {8, 4, "entries", 2}},
		"field missing":          {{0, 8, "ring_addr", 1}, {8, 8, "reserved", 2}},
	} {
		if errs := checkTable(rows, all, leaves, 16); len(errs) == 0 {
			t.Errorf("%s: not reported", name)
		}
	}
	if errs := checkTable(good, all, leaves, 16); len(errs) != 0 {
		t.Errorf("a correct table was reported: %v", errs)
	}
	// The diffing finds fields where the encoder puts them.
	all, _ = fieldSpans(t, new(QPAttr), encodePayloadOf)
	if all[span{48, 32}] != "AH" || all[span{48 + 16, 4}] != "AH.FlowLabel" || all[span{41, 1}] != "SQDraining" {
		t.Errorf("field spans %v", all)
	}
	if b := encodePayloadOf(new(QPAttr)); !bytes.Equal(b, make([]byte, binary.Size(QPAttr{}))) {
		t.Errorf("zero QPAttr does not encode to zeros")
	}
}
