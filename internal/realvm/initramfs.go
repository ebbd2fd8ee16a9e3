package realvm

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// File is one file of an initramfs.
type File struct {
	// Name is the path inside the archive, without a leading slash
	// ("init", "lib/modules/uio.ko").
	Name string
	// Source is a host file to copy; if empty, Data is the contents.
	Source string
	Data   []byte
	// Mode holds the permission bits, and fs.ModeCharDevice or
	// fs.ModeDir for a device node or an empty directory. Zero means the
	// source file's permissions, or 0644.
	Mode fs.FileMode
	// Major and Minor are a device node's numbers.
	Major, Minor uint32
}

// BuildInitramfs writes to dst an uncompressed newc cpio archive (what the
// kernel unpacks as its initramfs; uncompressed, since decompressing under
// TCG is slow) holding files. Parent directories are added as needed, and
// /dev/console (5, 1) unless files has one, so that /init always starts
// with a console. The archive is reproducible: owner root, mtime 0.
func BuildInitramfs(dst string, files []File) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".initramfs-*")
	if err != nil {
		return fmt.Errorf("realvm: initramfs: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("realvm: initramfs: %w", err)
	}
	w := bufio.NewWriter(tmp)
	if err := writeCPIO(w, files); err != nil {
		tmp.Close()
		return fmt.Errorf("realvm: initramfs %s: %w", dst, err)
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("realvm: initramfs %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("realvm: initramfs %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("realvm: initramfs: %w", err)
	}
	return nil
}

func writeCPIO(w io.Writer, files []File) error {
	c := cpioWriter{w: w, dirs: map[string]bool{".": true}}
	hasConsole := slices.ContainsFunc(files, func(f File) bool { return cleanName(f.Name) == "dev/console" })
	if !hasConsole {
		files = append([]File{{Name: "dev/console", Mode: fs.ModeCharDevice | 0o600, Major: 5, Minor: 1}}, files...)
	}
	seen := map[string]bool{}
	for _, f := range files {
		name := cleanName(f.Name)
		if name == "." || strings.HasPrefix(name, "../") || name == ".." {
			return fmt.Errorf("bad file name %q", f.Name)
		}
		if seen[name] {
			return fmt.Errorf("%s given twice", name)
		}
		seen[name] = true
		if err := c.parents(path.Dir(name)); err != nil {
			return err
		}
		if err := c.file(name, f); err != nil {
			return err
		}
	}
	return c.entry("TRAILER!!!", 0, 0, 0, 0, nil)
}

func cleanName(n string) string { return path.Clean(strings.TrimPrefix(n, "/")) }

type cpioWriter struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
}

func (c *cpioWriter) parents(dir string) error {
	if c.dirs[dir] {
		return nil
	}
	if err := c.parents(path.Dir(dir)); err != nil {
		return err
	}
	c.dirs[dir] = true
	return c.entry(dir, modeDir|0o755, 0, 0, 0, nil)
}

// newc mode bits (those of stat(2)).
const (
	modeReg  = 0o100000
	modeDir  = 0o040000
	modeChar = 0o020000
)

func (c *cpioWriter) file(name string, f File) error {
	perm := uint32(f.Mode.Perm())
	switch {
	case f.Mode&fs.ModeCharDevice != 0:
		return c.entry(name, modeChar|perm, f.Major, f.Minor, 0, nil)
	case f.Mode.IsDir():
		c.dirs[name] = true
		return c.entry(name, modeDir|perm, 0, 0, 0, nil)
	}
	data := f.Data
	if f.Source != "" {
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return err
		}
		data = b
		if perm == 0 {
			st, err := os.Stat(f.Source)
			if err != nil {
				return err
			}
			perm = uint32(st.Mode().Perm())
		}
	}
	if perm == 0 {
		perm = 0o644
	}
	return c.entry(name, modeReg|perm, 0, 0, uint32(len(data)), data)
}

// entry writes one newc header, the name and the data, each padded to 4
// bytes.
func (c *cpioWriter) entry(name string, mode, rmajor, rminor, size uint32, data []byte) error {
	c.ino++
	nlink := uint32(1)
	if mode&modeDir != 0 {
		nlink = 2
	}
	if name == "TRAILER!!!" {
		c.ino, nlink = 0, 1
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rmajor, rminor, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = append(buf, make([]byte, pad4(len(buf)))...)
	if _, err := c.w.Write(buf); err != nil {
		return err
	}
	if _, err := c.w.Write(data); err != nil {
		return err
	}
	_, err := c.w.Write(make([]byte, pad4(len(data))))
	return err
}

func pad4(n int) int { return (4 - n%4) % 4 }
