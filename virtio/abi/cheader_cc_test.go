package abi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCHeaderCompiles compiles the checked-in header with the host's C
// compiler ($CC, else cc) so that its static asserts run: as user space
// would include it, strict, and with -Wpadded so that any padding the
// compiler would insert is an error. It then runs a small program that
// checks the header's inline functions (arm word, WQE strides) against
// CQArmWord, SendWQEStride and RecvWQEStride. Without a compiler it
// skips, except under CI=true.
func TestCHeaderCompiles(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no C compiler %q under CI: %v", cc, err)
		}
		t.Skipf("no C compiler %q: %v", cc, err)
	}
	inc, err := filepath.Abs(filepath.Dir(cHeaderPath))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if cHeaderUpdating() {
		// TestCHeader may not have written the new header yet.
		inc = filepath.Join(dir, "include")
		if err := os.Mkdir(inc, 0o755); err != nil {
			t.Fatal(err)
		}
		writeCFile(t, filepath.Join(inc, filepath.Base(cHeaderPath)), renderCHeader(buildCHeader()))
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(cc, args...)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
		}
	}

	// Twice, to check the include guard.
	syntax := filepath.Join(dir, "syntax.c")
	writeCFile(t, syntax, "#include <vstellar-dev.h>\n#include <vstellar-dev.h>\n")
	run("-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wpadded", "-fsyntax-only", "-I", inc, syntax)
	run("-std=c11", "-Wall", "-Wextra", "-Werror", "-Wpedantic", "-fsyntax-only", "-I", inc, syntax)

	// The inline functions, computed by C.
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <vstellar-dev.h>\n\nint main(void)\n{\n")
	type sample struct{ sn, fl uint32 }
	var samples []sample
	for _, sn := range []uint32{0, 1, 5, 0x1234567, cqArmSNMask, ^uint32(0)} {
		for _, fl := range []uint32{0, CQArmNextComp, CQArmSolicited, ^uint32(0)} {
			samples = append(samples, sample{sn, fl})
			fmt.Fprintf(&src, "\tprintf(\"%%u\\n\", vstellar_cq_arm_word(%#xU, %#xU));\n", sn, fl)
		}
	}
	// The strides, within and past the ceilings.
	sges := []uint32{0, 1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 1000}
	inlines := []uint32{0, 1, 48, 64, 65, 256, 1000, 1024, 5000}
	for _, sge := range sges {
		for _, in := range inlines {
			fmt.Fprintf(&src, "\tprintf(\"%%llu\\n\", (unsigned long long)vstellar_send_wqe_stride(%dU, %dU));\n", sge, in)
		}
		fmt.Fprintf(&src, "\tprintf(\"%%llu\\n\", (unsigned long long)vstellar_recv_wqe_stride(%dU));\n", sge)
	}
	src.WriteString("\treturn 0;\n}\n")
	prog := filepath.Join(dir, "armword.c")
	writeCFile(t, prog, src.String())
	bin := filepath.Join(dir, "armword")
	run("-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I", inc, "-o", bin, prog)
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	if want := len(samples) + len(sges)*(len(inlines)+1); len(got) != want {
		t.Fatalf("%d results, want %d", len(got), want)
	}
	for i, s := range samples {
		if want := fmt.Sprint(CQArmWord(s.sn, s.fl)); got[i] != want {
			t.Errorf("vstellar_cq_arm_word(%#x, %#x) = %s, CQArmWord = %s", s.sn, s.fl, got[i], want)
		}
	}
	got = got[len(samples):]
	for _, sge := range sges {
		for _, in := range inlines {
			if want := fmt.Sprint(SendWQEStride(sge, in)); got[0] != want {
				t.Errorf("vstellar_send_wqe_stride(%d, %d) = %s, SendWQEStride = %s", sge, in, got[0], want)
			}
			got = got[1:]
		}
		if want := fmt.Sprint(RecvWQEStride(sge)); got[0] != want {
			t.Errorf("vstellar_recv_wqe_stride(%d) = %s, RecvWQEStride = %s", sge, got[0], want)
		}
		got = got[1:]
	}
}

func writeCFile(t *testing.T, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
