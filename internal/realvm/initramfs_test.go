package realvm

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// cpioEntry is one newc entry as readCPIO parses it.
type cpioEntry struct {
	name         string
	mode         uint32
	rmajor, rmin uint32
	data         []byte
}

// readCPIO parses a newc archive strictly (magic, padding, trailer last),
// independently of the writer.
func readCPIO(b []byte) ([]cpioEntry, error) {
	var out []cpioEntry
	off := 0
	field := func(i int) (uint32, error) {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		return uint32(v), err
	}
	for {
		if off+110 > len(b) {
			return nil, fmt.Errorf("truncated header at %d", off)
		}
		if string(b[off:off+6]) != "070701" {
			return nil, fmt.Errorf("bad magic at %d", off)
		}
		var f [13]uint32
		for i := range f {
			v, err := field(i)
			if err != nil {
				return nil, fmt.Errorf("field %d at %d: %w", i, off, err)
			}
			f[i] = v
		}
		mode, size, rmajor, rminor, namesize := f[1], f[6], f[9], f[10], int(f[11])
		nameEnd := off + 110 + namesize
		if nameEnd > len(b) || b[nameEnd-1] != 0 {
			return nil, fmt.Errorf("bad name at %d", off)
		}
		name := string(b[off+110 : nameEnd-1])
		dataOff := nameEnd + pad4(nameEnd)
		dataEnd := dataOff + int(size)
		if dataEnd > len(b) {
			return nil, fmt.Errorf("truncated data of %s", name)
		}
		for _, p := range b[nameEnd:dataOff] {
			if p != 0 {
				return nil, fmt.Errorf("non-zero padding after %s", name)
			}
		}
		off = dataEnd + pad4(dataEnd)
		if name == "TRAILER!!!" {
			if off != len(b) {
				return nil, fmt.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out, nil
		}
		out = append(out, cpioEntry{name, mode, rmajor, rminor, b[dataOff:dataEnd]})
	}
}

func TestBuildInitramfs(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte("#!/bin/true\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "initrd.cpio")
	files := []File{
		{Name: "init", Source: src},
		{Name: "/lib/modules/uio.ko", Data: []byte("12345")}, // 5 bytes: padded
		{Name: "etc/empty", Data: nil},
		{Name: "mnt", Mode: fs.ModeDir | 0o700},
	}
	if err := BuildInitramfs(dst, files); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readCPIO(b)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cpioEntry{}
	var order []string
	for _, e := range entries {
		got[e.name] = e
		order = append(order, e.name)
	}
	want := map[string]struct {
		mode uint32
		data string
	}{
		"dev":                {0o040755, ""},
		"dev/console":        {0o020600, ""},
		"init":               {0o100750, "#!/bin/true\n"},
		"lib":                {0o040755, ""},
		"lib/modules":        {0o040755, ""},
		"lib/modules/uio.ko": {0o100644, "12345"},
		"etc":                {0o040755, ""},
		"etc/empty":          {0o100644, ""},
		"mnt":                {0o040700, ""},
	}
	if len(entries) != len(want) {
		t.Errorf("entries %v, want %d", order, len(want))
	}
	for name, w := range want {
		e, ok := got[name]
		if !ok {
			t.Errorf("no %s in %v", name, order)
			continue
		}
		if e.mode != w.mode || string(e.data) != w.data {
			t.Errorf("%s: mode %o data %q, want %o %q", name, e.mode, e.data, w.mode, w.data)
		}
	}
	if c := got["dev/console"]; c.rmajor != 5 || c.rmin != 1 {
		t.Errorf("dev/console is %d:%d, want 5:1", c.rmajor, c.rmin)
	}
	// A directory comes before what it holds.
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	if !(pos["lib"] < pos["lib/modules"] && pos["lib/modules"] < pos["lib/modules/uio.ko"]) {
		t.Errorf("parents after children: %v", order)
	}

	// Reproducible.
	if err := BuildInitramfs(dst+"2", files); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(dst + "2"); !bytes.Equal(b, b2) {
		t.Error("two builds of the same files differ")
	}

	// GNU cpio reads it the same way.
	if _, err := exec.LookPath("cpio"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("cpio not installed (prepare.sh installs it)")
		}
		t.Skip("cpio not installed: skipping the check with GNU cpio")
	}
	f, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("cpio", "-it", "--quiet")
	cmd.Stdin = f
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", err)
	}
	if listed := strings.Fields(string(out)); strings.Join(listed, " ") != strings.Join(order, " ") {
		t.Errorf("cpio lists %v, want %v", listed, order)
	}
}

func TestBuildInitramfsRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, files := range [][]File{
		{{Name: "a", Data: []byte("x")}, {Name: "/a", Data: []byte("y")}},
		{{Name: "../escape"}},
		{{Name: "/"}},
		{{Name: "x", Source: filepath.Join(dir, "missing")}},
	} {
		dst := filepath.Join(dir, "out.cpio")
		if err := BuildInitramfs(dst, files); err == nil {
			t.Errorf("%+v: no error", files)
		}
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Errorf("%+v: left %s behind", files, dst)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".initramfs-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
