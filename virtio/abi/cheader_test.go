package abi

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestCHeader keeps guest-driver/include/vstellar-dev.h equal to what the
// Go definition generates. With -update (or VSTELLAR_UPDATE=1) it rewrites
// the header instead:
//
//	go test ./virtio/abi -run TestCHeader -update

var updateCHeader = flag.Bool("update", false, "rewrite guest-driver/include/vstellar-dev.h from the Go definition")

func cHeaderUpdating() bool { return *updateCHeader || os.Getenv("VSTELLAR_UPDATE") == "1" }

func TestCHeader(t *testing.T) {
	want := renderCHeader(buildCHeader())
	if cHeaderUpdating() {
		if err := os.WriteFile(cHeaderPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", cHeaderPath)
		return
	}
	got, err := os.ReadFile(cHeaderPath)
	if err != nil {
		t.Fatalf("%v; generate it with: %s", err, cHeaderRegen)
	}
	if string(got) != want {
		t.Fatalf("%s is not what package abi generates; regenerate it with\n\t%s\n%s",
			cHeaderPath, cHeaderRegen, lineDiff(string(got), want))
	}
}

// lineDiff is a short diff-like hint: the first differing lines of the
// checked-in text (-) and the generated one (+), with context.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	// Skip the common tail to show only the changed hunk.
	eg, ew := len(g), len(w)
	for eg > i && ew > i && g[eg-1] == w[ew-1] {
		eg--
		ew--
	}
	var b strings.Builder
	fmt.Fprintf(&b, "@@ line %d: -%d +%d lines @@\n", i+1, eg-i, ew-i)
	for j := max(0, i-3); j < i; j++ {
		fmt.Fprintf(&b, " %s\n", g[j])
	}
	const most = 20
	for j := i; j < eg && j < i+most; j++ {
		fmt.Fprintf(&b, "-%s\n", g[j])
	}
	for j := i; j < ew && j < i+most; j++ {
		fmt.Fprintf(&b, "+%s\n", w[j])
	}
	if eg-i > most || ew-i > most {
		b.WriteString("...\n")
	}
	return b.String()
}

// TestCHeaderLayouts proves every struct of the header against the Go
// definition: its fields tile it with natural alignment (so a C compiler
// adds no padding), every Go field is in it, encoding a Go value whose
// fields all hold distinct bytes puts each field's bytes exactly at the
// listed offset with the listed width, the Go offset constants named by
// the listing hold those offsets, and docs/spec.md's table (if any)
// names the same fields at the same places.
func TestCHeaderLayouts(t *testing.T) {
	h := buildCHeader()
	structs := map[string]cStruct{}
	for _, s := range h.sections {
		for _, st := range s.structs {
			if _, dup := structs[st.name]; dup {
				t.Errorf("struct vstellar_%s twice", st.name)
			}
			structs[st.name] = st
		}
	}
	consts, err := abiConsts()
	if err != nil {
		t.Fatal(err)
	}
	lines := readSpec(t)
	for _, s := range structsInOrder(h) {
		t.Run(s.name, func(t *testing.T) {
			checkTiling(t, s, structs)
			for _, f := range s.fields {
				if f.offName == "" {
					continue
				}
				if g, ok := consts[f.offName]; !ok || !g.ok || g.val != uint64(f.off) {
					t.Errorf("%s: offset constant %s = %+v, listed offset %#x", f.name, f.offName, g, f.off)
				}
			}
			if s.goType != nil {
				checkEncoding(t, s, structs)
			}
			if s.specMarker != "" {
				rows, _ := tableAfter(t, lines, s.specMarker)
				checkSpecNames(t, s, rows)
			}
		})
	}
}

func structsInOrder(h cHeader) []cStruct {
	var out []cStruct
	for _, s := range h.sections {
		out = append(out, s.structs...)
	}
	return out
}

// cAlign is the alignment a C compiler gives field f (natural alignment
// of its element type).
func cAlign(f cField, structs map[string]cStruct) int {
	if name, ok := strings.CutPrefix(f.ctype, "struct vstellar_"); ok {
		a := 1
		for _, g := range structs[name].fields {
			a = max(a, cAlign(g, structs))
		}
		return a
	}
	if f.count > 0 {
		return f.size / f.count
	}
	return f.size
}

func checkTiling(t *testing.T, s cStruct, structs map[string]cStruct) {
	t.Helper()
	next, align := 0, 1
	for _, f := range s.fields {
		if f.off != next {
			t.Errorf("%s at %#x, the previous field ends at %#x", f.name, f.off, next)
		}
		if name, ok := strings.CutPrefix(f.ctype, "struct vstellar_"); ok {
			n, found := structs[name]
			if !found || n.size != f.size {
				t.Errorf("%s: %s is not a struct of %d bytes in the header", f.name, f.ctype, f.size)
			}
		}
		a := cAlign(f, structs)
		if a == 0 || f.off%a != 0 {
			t.Errorf("%s at %#x is not aligned to %d: C would pad", f.name, f.off, a)
		}
		align = max(align, a)
		next = f.off + f.size
	}
	if next != s.size {
		t.Errorf("fields end at %#x, the struct is %d bytes", next, s.size)
	}
	if s.size%align != 0 {
		t.Errorf("size %d is not a multiple of the alignment %d: C would pad", s.size, align)
	}
}

// fillDistinct sets every unsigned integer inside v to bytes that appear
// nowhere else in the value (and are never 0), counting from *n.
func fillDistinct(v reflect.Value, n *int) {
	switch v.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var x uint64
		for i := 0; i < int(v.Type().Size()); i++ {
			*n++
			x |= uint64(*n%255+1) << (8 * i)
		}
		v.SetUint(x)
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fillDistinct(v.Index(i), n)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fillDistinct(v.Field(i), n)
		}
	default:
		panic(fmt.Sprintf("fillDistinct: %v", v.Kind()))
	}
}

// putLE writes v (an unsigned integer or an array of them) at b[0:].
func putLE(b []byte, v reflect.Value) {
	switch v.Kind() {
	case reflect.Array:
		w := int(v.Type().Elem().Size())
		for i := 0; i < v.Len(); i++ {
			putLE(b[i*w:], v.Index(i))
		}
	default:
		x := v.Uint()
		for i := 0; i < int(v.Type().Size()); i++ {
			b[i] = byte(x >> (8 * i))
		}
	}
}

func fieldByPath(v reflect.Value, p string) reflect.Value {
	for _, n := range strings.Split(p, ".") {
		v = v.FieldByName(n)
		if !v.IsValid() {
			panic("no Go field " + p)
		}
	}
	return v
}

// expectBytes writes what the C listing says value v encodes to.
func expectBytes(t *testing.T, s cStruct, v reflect.Value, b []byte, structs map[string]cStruct) {
	t.Helper()
	for _, f := range s.fields {
		if f.goPath == "" {
			continue // reserved: zero
		}
		fv := fieldByPath(v, f.goPath)
		if int(fv.Type().Size()) != f.size {
			t.Errorf("%s is %d bytes in C, Go field %s has %d", f.name, f.size, f.goPath, fv.Type().Size())
			continue
		}
		if name, ok := strings.CutPrefix(f.ctype, "struct vstellar_"); ok {
			expectBytes(t, structs[name], fv, b[f.off:f.off+f.size], structs)
			continue
		}
		putLE(b[f.off:f.off+f.size], fv)
	}
}

// goLeaves lists the paths of the non-struct fields of typ.
func goLeaves(typ reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Type.Kind() == reflect.Struct {
			out = append(out, goLeaves(f.Type, prefix+f.Name+".")...)
			continue
		}
		out = append(out, prefix+f.Name)
	}
	return out
}

func checkEncoding(t *testing.T, s cStruct, structs map[string]cStruct) {
	t.Helper()
	// Every Go field is in the listing. (A reflected struct lists its
	// fields by construction; a nested one is covered by its own struct.)
	if !s.reflected {
		listed := map[string]bool{}
		for _, f := range s.fields {
			listed[f.goPath] = true
		}
		for _, p := range goLeaves(s.goType, "") {
			if !listed[p] {
				t.Errorf("Go field %s.%s is not in struct vstellar_%s", s.goType.Name(), p, s.name)
			}
		}
	}
	pv := reflect.New(s.goType)
	n := 0
	fillDistinct(pv.Elem(), &n)
	got := s.encode(pv.Interface())
	if len(got) != s.size {
		t.Fatalf("Go encodes %d bytes, the struct is %d", len(got), s.size)
	}
	want := make([]byte, s.size)
	expectBytes(t, s, pv.Elem(), want, structs)
	for _, f := range s.fields {
		if g, w := got[f.off:f.off+f.size], want[f.off:f.off+f.size]; !bytes.Equal(g, w) {
			t.Errorf("%s at %#x (%d bytes): Go encodes % x, the listing says % x", f.name, f.off, f.size, g, w)
		}
	}
	// A nested struct's reflected listing must also match its own
	// encoding: checked when that struct's own subtest runs.
}

// specFieldName is the field name in a spec table's field column
// ("ah_attr (**AHAttr**, §7.5)" names ah_attr).
func specFieldName(col string) string {
	col = strings.Trim(strings.TrimSpace(col), "`*")
	if i := strings.IndexAny(col, " ("); i >= 0 {
		col = col[:i]
	}
	return col
}

func checkSpecNames(t *testing.T, s cStruct, rows []docRow) {
	t.Helper()
	for _, r := range rows {
		name := specFieldName(r.name)
		if r.size < 0 {
			if r.off != s.size {
				t.Errorf("spec line %d: sizeless row %q inside the struct", r.line, r.name)
			}
			continue
		}
		if strings.HasPrefix(name, "reserved") {
			for _, f := range s.fields {
				if f.off < r.off+r.size && r.off < f.off+f.size && !strings.HasPrefix(f.name, "reserved") {
					t.Errorf("spec line %d: reserved [%#x, +%d) is field %s in C", r.line, r.off, r.size, f.name)
				}
			}
			continue
		}
		found := false
		for _, f := range s.fields {
			if f.off == r.off {
				found = true
				if f.name != name || f.size != r.size {
					t.Errorf("spec line %d: %s (%d bytes) at %#x, C has %s (%d bytes)", r.line, name, r.size, r.off, f.name, f.size)
				}
			}
		}
		if !found {
			t.Errorf("spec line %d: no C field at %#x (%s)", r.line, r.off, name)
		}
	}
}

// cHeaderSkip are the exported constants of package abi the header does
// not carry, and why.
var cHeaderSkip = map[string]string{
	"QueryDeviceReqSize": "QUERY_DEVICE's request is empty",
}

// TestCHeaderConstants checks that every #define with a Go name holds
// that Go constant's value, that names are unique, and that every
// exported constant of the package is in the header (as a #define or as
// the offset of a struct field) or in cHeaderSkip.
func TestCHeaderConstants(t *testing.T) {
	consts, err := abiConsts()
	if err != nil {
		t.Fatal(err)
	}
	h := buildCHeader()
	used := map[string]bool{}
	names := map[string]bool{}
	for _, s := range h.sections {
		for _, g := range s.groups {
			for _, c := range g.consts {
				if names[c.name] {
					t.Errorf("%s defined twice", c.name)
				}
				names[c.name] = true
				if !strings.HasPrefix(c.name, "VSTELLAR_") || strings.ToUpper(c.name) != c.name {
					t.Errorf("%s: not VSTELLAR_UPPER_CASE", c.name)
				}
				if c.form == formHex && c.val > 0xffffffff {
					t.Errorf("%s = %#x does not fit the U suffix", c.name, c.val)
				}
				if c.goName == "" {
					continue
				}
				used[c.goName] = true
				if g, ok := consts[c.goName]; !ok || !g.ok || g.val != c.val {
					t.Errorf("%s: Go constant %s is %+v, the header says %#x", c.name, c.goName, g, c.val)
				}
			}
		}
		for _, st := range s.structs {
			if names["struct "+st.name] {
				t.Errorf("struct vstellar_%s twice", st.name)
			}
			names["struct "+st.name] = true
			for _, f := range st.fields {
				if f.offName != "" {
					used[f.offName] = true
				}
			}
		}
	}
	for name, g := range consts {
		if !ast.IsExported(name) || used[name] {
			continue
		}
		if _, ok := cHeaderSkip[name]; ok {
			continue
		}
		t.Errorf("exported constant %s (%s) is not in the header: add it to the model in cheader_model_test.go or to cHeaderSkip", name, g.typ)
	}
	for name := range cHeaderSkip {
		if used[name] {
			t.Errorf("%s is both in the header and in cHeaderSkip", name)
		}
	}
	// The ceilings are CeilingLimits, field by field.
	cl := reflect.ValueOf(CeilingLimits)
	for i := 0; i < cl.NumField(); i++ {
		f := cl.Type().Field(i)
		n := "VSTELLAR_CEILING_" + upperSnake(f.Name)
		if f.Name == "PageSizeCap" {
			continue // no ceiling: any set of page sizes with 4 KiB
		}
		if !names[n] {
			t.Errorf("%s missing for CeilingLimits.%s", n, f.Name)
		}
	}
}

// TestCHeaderOpcodes checks the payload named in each opcode's comment
// against the sizes the device enforces.
func TestCHeaderOpcodes(t *testing.T) {
	sizes := map[string]int{"": 0}
	for _, s := range structsInOrder(buildCHeader()) {
		sizes[s.name] = s.size
	}
	for _, op := range Opcodes() {
		p, ok := opPayloads[op]
		if !ok {
			t.Errorf("%v: no payload entry", op)
			continue
		}
		req, resp := payloadStruct(p.newReq), payloadStruct(p.newResp)
		wantReq, _ := op.RequestSize()
		wantResp, _ := op.ResponseSize()
		if n, ok := sizes[req]; !ok || n != wantReq {
			t.Errorf("%v: request vstellar_%s is %d bytes (in header: %v), the device wants %d", op, req, n, ok, wantReq)
		}
		if n, ok := sizes[resp]; !ok || n != wantResp {
			t.Errorf("%v: response vstellar_%s is %d bytes (in header: %v), the device sends %d", op, resp, n, ok, wantResp)
		}
	}
}

// TestCHeaderArmWord checks vstellar_cq_arm_word's formula, written with
// the generated shift and mask, against CQArmWord.
func TestCHeaderArmWord(t *testing.T) {
	flagsMask := CQArmWord(0, ^uint32(0))
	for _, sn := range []uint32{0, 1, 2, 3, 0x1234567, cqArmSNMask, cqArmSNMask + 1, ^uint32(0)} {
		for _, fl := range []uint32{0, CQArmNextComp, CQArmSolicited, CQArmNextComp | CQArmSolicited, ^uint32(0)} {
			if c, g := sn<<cqArmShift|fl&flagsMask, CQArmWord(sn, fl); c != g {
				t.Errorf("arm word (%#x, %#x): C %#x, Go %#x", sn, fl, c, g)
			}
		}
	}
	if gotSN, _ := SplitCQArmWord(CQArmWord(cqArmSNMask, 0)); gotSN != cqArmSNMask {
		t.Errorf("arm_sn mask %#x does not round-trip: %#x", cqArmSNMask, gotSN)
	}
}

// TestCHeaderStyle checks what checkpatch would: SPDX first, tabs for
// indentation, no trailing whitespace, at most 100 columns.
func TestCHeaderStyle(t *testing.T) {
	text := renderCHeader(buildCHeader())
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */") {
		t.Errorf("first line %q", lines[0])
	}
	blank := 0
	for i, l := range lines {
		n := i + 1
		if strings.TrimRight(l, " \t") != l {
			t.Errorf("line %d: trailing whitespace", n)
		}
		if cols(l) > 100 {
			t.Errorf("line %d: %d columns", n, cols(l))
		}
		if strings.HasPrefix(l, " ") && !strings.HasPrefix(l, " *") {
			t.Errorf("line %d: indented with spaces", n)
		}
		if strings.Contains(l, "        ") && !strings.HasPrefix(l, "\t      \"") {
			t.Errorf("line %d: 8 spaces", n)
		}
		if l == "" {
			if blank++; blank > 1 {
				t.Errorf("line %d: two blank lines", n)
			}
		} else {
			blank = 0
		}
	}
}

func TestCHeaderDiffHint(t *testing.T) {
	got := lineDiff("a\nb\nc\nd\ne\n", "a\nb\nX\nd\ne\n")
	want := "@@ line 3: -1 +1 lines @@\n a\n b\n-c\n+X\n"
	if got != want {
		t.Errorf("lineDiff:\n%s\nwant\n%s", got, want)
	}
}
