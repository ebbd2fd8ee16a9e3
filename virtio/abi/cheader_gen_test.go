package abi

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// The header generator: it reads this package's constants from its source
// (so that it knows their Go names), renders the model of
// cheader_model_test.go as C, and is run by TestCHeader.

const (
	cHeaderPath  = "../../guest-driver/include/vstellar-dev.h"
	cHeaderRegen = "go test ./virtio/abi -run TestCHeader -update"
)

// goConst is an exported or unexported constant of package abi.
type goConst struct {
	name string
	typ  string // "Opcode", "uint32", "untyped int", ...
	val  uint64
	ok   bool // val holds the value exactly
}

// abiConsts parses the package's non-test files and evaluates every
// package-level constant. The imports are stubbed: constants here depend
// on none of them, and the type errors that stubbing causes in function
// bodies are ignored.
var abiConsts = sync.OnceValues(func() (map[string]goConst, error) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: stubImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check("abi", fset, files, nil)
	out := map[string]goConst{}
	for _, n := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(n).(*types.Const)
		if !ok {
			continue
		}
		g := goConst{name: n, typ: types.TypeString(c.Type(), types.RelativeTo(pkg))}
		if v := constant.ToInt(c.Val()); v.Kind() == constant.Int {
			g.val, g.ok = constant.Uint64Val(v)
		}
		out[n] = g
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no constants found in %v", names)
	}
	return out, nil
})

type stubImporter struct{}

func (stubImporter) Import(p string) (*types.Package, error) {
	pkg := types.NewPackage(p, path.Base(p))
	pkg.MarkComplete()
	return pkg, nil
}

// typedConsts returns the exported constants of Go type typ in value
// order, except those named in skip.
func typedConsts(typ string, form cForm, skip ...string) []cConst {
	all, err := abiConsts()
	if err != nil {
		panic(err)
	}
	var gs []goConst
	for _, g := range all {
		if g.typ == typ && ast.IsExported(g.name) && !contains(skip, g.name) {
			if !g.ok {
				panic(fmt.Sprintf("cheader: constant %s has no exact value", g.name))
			}
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].val != gs[j].val {
			return gs[i].val < gs[j].val
		}
		return gs[i].name < gs[j].name
	})
	out := make([]cConst, 0, len(gs))
	for _, g := range gs {
		out = append(out, cdef(g.name, g.val, form, ""))
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// --- rendering ---

const cHeaderBanner = `/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * vStellar device ABI %d.%d (docs/spec.md): the layout of everything that
 * crosses the guest/device boundary of the paravirtual RDMA device, for the
 * Linux kernel driver and the rdma-core provider.
 *
 * Generated from package virtio/abi, the one definition of the ABI, by
 *	%s
 * Do not edit: change the Go definition and regenerate. The static
 * assertions make the C compiler prove every size and offset equal to Go's.
 *
 * All multi-byte fields are little-endian; a field named reserved is
 * written as zero by the driver and ignored when the device wrote it.
 */
#ifndef VSTELLAR_DEV_H
#define VSTELLAR_DEV_H

#include <linux/types.h>
#ifdef __KERNEL__
#include <linux/build_bug.h>
#include <linux/stddef.h>
#else
#include <assert.h>
#include <stddef.h>
#endif
`

// renderCHeader renders the model as the header's text.
func renderCHeader(h cHeader) string {
	var b strings.Builder
	fmt.Fprintf(&b, cHeaderBanner, ABIMajor, ABIMinor, cHeaderRegen)
	for _, s := range h.sections {
		b.WriteString("\n")
		writeComment(&b, "", s.title, true)
		for _, g := range s.groups {
			b.WriteString("\n")
			writeGroup(&b, g)
		}
		for _, st := range s.structs {
			b.WriteString("\n")
			writeStruct(&b, st)
		}
		if s.extra != "" {
			b.WriteString("\n")
			b.WriteString(s.extra)
		}
	}
	b.WriteString("\n#endif /* VSTELLAR_DEV_H */\n")
	return b.String()
}

// writeComment writes text as a C comment: one line as /* text */, more
// (or block) in the kernel's multi-line form.
func writeComment(b *strings.Builder, indent, text string, block bool) {
	if text == "" {
		return
	}
	lines := strings.Split(text, "\n")
	if len(lines) == 1 && !block {
		fmt.Fprintf(b, "%s/* %s */\n", indent, text)
		return
	}
	fmt.Fprintf(b, "%s/*\n", indent)
	for _, l := range lines {
		if l == "" {
			fmt.Fprintf(b, "%s *\n", indent)
		} else {
			fmt.Fprintf(b, "%s * %s\n", indent, l)
		}
	}
	fmt.Fprintf(b, "%s */\n", indent)
}

// cols is the display width of s with 8-column tabs, starting at column 0.
func cols(s string) int {
	n := 0
	for _, r := range s {
		if r == '\t' {
			n = n/8*8 + 8
		} else {
			n++
		}
	}
	return n
}

// padTo appends tabs to s until it reaches column col (at least one tab).
func padTo(s string, col int) string {
	s += "\t"
	for cols(s) < col {
		s += "\t"
	}
	return s
}

func nextTab(c int) int { return c/8*8 + 8 }

func (c cConst) value() string {
	switch c.form {
	case formHex:
		return fmt.Sprintf("0x%xU", c.val)
	case formHex64:
		return fmt.Sprintf("0x%xULL", c.val)
	}
	return fmt.Sprintf("%d", c.val)
}

func writeGroup(b *strings.Builder, g cGroup) {
	writeComment(b, "", g.doc, false)
	nameCol, valCol := 0, 0
	for _, c := range g.consts {
		nameCol = max(nameCol, nextTab(cols("#define "+c.name)))
	}
	for _, c := range g.consts {
		valCol = max(valCol, nextTab(nameCol+len(c.value())))
	}
	for _, c := range g.consts {
		l := padTo("#define "+c.name, nameCol) + c.value()
		if c.comment != "" {
			l = padTo(l, valCol) + "/* " + c.comment + " */"
		}
		b.WriteString(l + "\n")
	}
}

func (f cField) decl() string {
	if f.count > 0 {
		return fmt.Sprintf("\t%s %s[%d];", f.ctype, f.name, f.count)
	}
	return fmt.Sprintf("\t%s %s;", f.ctype, f.name)
}

func writeStruct(b *strings.Builder, s cStruct) {
	writeComment(b, "", s.doc, false)
	fmt.Fprintf(b, "struct vstellar_%s {\n", s.name)
	col := 0
	for _, f := range s.fields {
		col = max(col, nextTab(cols(f.decl())))
	}
	for _, f := range s.fields {
		l := f.decl()
		if f.comment != "" {
			l = padTo(l, col) + "/* " + f.comment + " */"
		}
		b.WriteString(l + "\n")
	}
	b.WriteString("};\n\n")
	writeAssert(b, fmt.Sprintf("sizeof(struct vstellar_%s) == %d", s.name, s.size), fmt.Sprintf("sizeof vstellar_%s", s.name))
	for _, f := range s.fields {
		writeAssert(b, fmt.Sprintf("offsetof(struct vstellar_%s, %s) == 0x%02x", s.name, f.name, f.off),
			fmt.Sprintf("vstellar_%s.%s", s.name, f.name))
	}
}

// writeAssert writes a static assertion on one line, or two when one
// would pass 100 columns. static_assert is C11's _Static_assert (from
// <assert.h>, or <linux/build_bug.h> in the kernel); checkpatch takes the
// keyword's own spelling for CamelCase.
func writeAssert(b *strings.Builder, cond, msg string) {
	l := fmt.Sprintf("static_assert(%s, %q);", cond, msg)
	if cols(l) <= 100 {
		b.WriteString(l + "\n")
		return
	}
	fmt.Fprintf(b, "static_assert(%s,\n\t      %q);\n", cond, msg)
}
