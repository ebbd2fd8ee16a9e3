package realvm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
)

// The kernel driver builds with no warning (W=1) against the guest
// kernel's headers (with the compiler that built it) and sid's newest,
// and checkpatch finds nothing in it.
func TestGuestDriverBuildsClean(t *testing.T) {
	e := Require(t)
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, headers, cc string }{
		{"guest-kernel", e.RDMA.KernelHeaders, "gcc-14"},
		{"newest-kernel", e.RDMA.NewestKernelHeaders, "gcc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.InRoot(t.Context(), repo+"/guest-driver", fmt.Sprintf(`
				b=$(mktemp -d); trap 'rm -rf $b' EXIT
				cp -r /srv/src/include /srv/src/linux $b/
				make -s -C %s M=$b/linux CC=%s W=1 modules >$b/log 2>&1 || { cat $b/log; exit 1; }
				# The headers' kernel-doc script warns about itself under sid's perl.
				grep -v 'kernel-doc line' $b/log || true`, c.headers, c.cc))
			if err != nil {
				t.Fatalf("%s: %v\n%s", c.headers, err, out)
			}
			if w := regexp.MustCompile(`(?m)^.*(warning|error):.*$`).FindAll(out, -1); len(w) > 0 {
				t.Errorf("%d warnings:\n%s", len(w), out)
			}
		})
	}
	t.Run("checkpatch", func(t *testing.T) {
		out, err := e.InRoot(t.Context(), repo+"/guest-driver", fmt.Sprintf(
			`cd /srv/src && %s --no-tree --strict --terse -f linux/*.c linux/*.h include/*.h`, e.RDMA.Checkpatch))
		if err != nil || regexp.MustCompile(`(?m)^[^ ]+:\d+: `).Match(out) {
			t.Errorf("checkpatch: %v\n%s", err, out)
		}
	})
}

// BuildRDMA builds the driver, the provider and the test programs, and
// takes them from its cache the second time.
func TestBuildRDMA(t *testing.T) {
	e := Require(t)
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.BuildRDMA(t.Context(), repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{b.Module, b.Provider, b.DriverFile} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
	if d, err := os.ReadFile(b.DriverFile); err != nil || string(d) != "driver vstellar\n" {
		t.Errorf("vstellar.driver: %q, %v", d, err)
	}
	again, err := e.BuildRDMA(t.Context(), repo)
	if err != nil || !again.Cached || again.Module != b.Module {
		t.Errorf("second build: %+v, %v", again, err)
	}
}

// The provider's data path on rings in plain memory (no kernel, no
// device): WQE layout, refusals, full rings, CQE conversion and wrap,
// arming, the ibv_wr_* API, and posting against a thread that sleeps and
// wakes like the engine (guest-driver/rdma-core/tests/fake_ring.c).
func TestProviderDataPath(t *testing.T) {
	e := Require(t)
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.InRoot(t.Context(), repo+"/guest-driver", "bash /srv/src/rdma-core/tests/run.sh "+e.RDMA.RDMACoreSrc)
	if err != nil || !regexp.MustCompile(`(?m)^PASS$`).Match(out) {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// Test packages build at once: BuildRDMA of the same sources from two
// goroutines builds once and gives both the same build.
func TestBuildRDMAConcurrent(t *testing.T) {
	e := Require(t)
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Sources of their own (a stamp changes the hash), so the cache
	// cannot answer.
	src := t.TempDir()
	for _, d := range append([]string{"internal/realvm"}, rdmaSources...) {
		if err := os.CopyFS(filepath.Join(src, d), os.DirFS(filepath.Join(repo, d))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	stamp := fmt.Sprintf("%d\n", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(src, "guest-driver/include/.stamp"), []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var builds [2]RDMABuild
	var errs [2]error
	for i := range builds {
		wg.Go(func() { builds[i], errs[i] = e.BuildRDMA(t.Context(), src) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("%v / %v", errs[0], errs[1])
	}
	if builds[0].Module != builds[1].Module || builds[0].Cached == builds[1].Cached {
		t.Fatalf("builds %+v and %+v: want one build, taken by the other from the cache", builds[0], builds[1])
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(builds[0].Module)) })
	if !builds[0].complete() {
		t.Fatalf("build %s is incomplete", filepath.Dir(builds[0].Module))
	}
}
