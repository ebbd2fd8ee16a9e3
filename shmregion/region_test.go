package shmregion

import (
	"errors"
	"os"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
	"golang.org/x/sys/unix"
)

func newRegion(t *testing.T, name string, pages uint64) *Region {
	t.Helper()
	r, err := New(name, pages*guestmem.PageSize())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// mapLikeVMM maps the region's fd a second time, as the front-end does
// after SHMEM_MAP: from a duplicate of the fd, MAP_SHARED.
func mapLikeVMM(t *testing.T, r *Region) guestmem.View {
	t.Helper()
	fd, err := unix.Dup(r.Fd())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	m, err := guestmem.MapOwn(fd, 0, r.Size())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	return m.View()
}

func TestRegionsAreSeparateFiles(t *testing.T) {
	a, b := newRegion(t, "dev0-doorbells", 2), newRegion(t, "dev1-doorbells", 2)
	var sa, sb unix.Stat_t
	if err := unix.Fstat(a.Fd(), &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(b.Fd(), &sb); err != nil {
		t.Fatal(err)
	}
	if sa.Ino == sb.Ino && sa.Dev == sb.Dev {
		t.Fatalf("two regions share inode %d", sa.Ino)
	}
	// A guest ringing every doorbell of device a changes nothing of b.
	ga := mapLikeVMM(t, a)
	for i := range ga.Bytes() {
		ga.Bytes()[i] = 0xff
	}
	for i, x := range b.View().Bytes() {
		if x != 0 {
			t.Fatalf("byte %d of the other device's region changed", i)
		}
	}
}

func TestSharedWithSecondMapping(t *testing.T) {
	r := newRegion(t, "shared", 1)
	if r.Size() != guestmem.PageSize() || r.View().Len() != r.Size() {
		t.Fatalf("size %d view %d", r.Size(), r.View().Len())
	}
	guest := mapLikeVMM(t, r)
	r.View().StoreUint32Release(64, 0xdeadbeef)
	if got := guest.LoadUint32Acquire(64); got != 0xdeadbeef {
		t.Fatalf("guest sees %#x", got)
	}
	guest.StoreUint64Release(128, 42)
	if got := r.View().LoadUint64Acquire(128); got != 42 {
		t.Fatalf("host sees %d", got)
	}
	if err := r.Zero(); err != nil {
		t.Fatal(err)
	}
	if guest.Uint32(64) != 0 || r.View().Uint64(128) != 0 {
		t.Fatal("Zero left data behind")
	}
	// Still usable after Zero.
	r.View().PutUint32(0, 7)
	if guest.Uint32(0) != 7 {
		t.Fatal("region unusable after Zero")
	}
}

func TestSealed(t *testing.T) {
	r := newRegion(t, "sealed", 1)
	seals, err := unix.FcntlInt(uintptr(r.Fd()), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if seals&want != want || seals&unix.F_SEAL_WRITE != 0 {
		t.Fatalf("seals %#x, want %#x without F_SEAL_WRITE", seals, want)
	}
	for _, size := range []int64{0, int64(r.Size()) / 2, int64(r.Size()) * 2} {
		if err := unix.Ftruncate(r.Fd(), size); !errors.Is(err, unix.EPERM) {
			t.Errorf("ftruncate(%d) = %v, want EPERM", size, err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(r.Fd()), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); err == nil {
		t.Error("seals could be changed")
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.Fd(), &st); err != nil || uint64(st.Size) != r.Size() {
		t.Fatalf("size after attempts: %d %v", st.Size, err)
	}
	flags, err := unix.FcntlInt(uintptr(r.Fd()), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd not close-on-exec: %#x %v", flags, err)
	}
}

func TestBadSizes(t *testing.T) {
	ps := guestmem.PageSize()
	for _, size := range []uint64{0, 1, ps - 1, ps + 1, MaxSize + ps} {
		if r, err := New("bad", size); err == nil {
			r.Close()
			t.Errorf("size %d accepted", size)
		}
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no /proc/self/fd")
		}
		t.Skip("no /proc/self/fd (fd-leak check needs it)")
	}
	return len(ents)
}

func TestCloseReleases(t *testing.T) {
	before := openFDs(t)
	var rs []*Region
	for range 16 {
		r, err := New("leak", guestmem.PageSize())
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if got := openFDs(t); got != before+16 {
		t.Fatalf("%d fds open with 16 regions, started with %d", got, before)
	}
	for _, r := range rs {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if r.Fd() != -1 || r.View().Len() != 0 {
			t.Fatal("closed region still exposes its fd or mapping")
		}
		if err := r.Zero(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Zero after Close: %v", err)
		}
	}
	if got := openFDs(t); got != before {
		t.Fatalf("%d fds open after Close, want %d", got, before)
	}
}
