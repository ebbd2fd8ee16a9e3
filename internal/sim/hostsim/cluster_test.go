package hostsim

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/netlab"
)

// needNamespaces skips (outside CI, which runs as root) when network
// namespaces cannot be made here.
func needNamespaces(t *testing.T) {
	t.Helper()
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI runs as root: %v", err)
		}
		t.Skipf("a cluster needs network namespaces (root): %v", err)
	}
}

// TestClusterCrossLeafWrite boots two hosts under different leaves of a
// two-spine fabric and WRITEs 1 MiB from a VM on one into a VM on the
// other: the bytes arrive, and the leaf's counters show where they went.
// The single-path selector keeps the connection on one spine; a sprayer
// over 16 source ports uses both (the hash seed is fixed, so which ports
// go where is the same in every run).
func TestClusterCrossLeafWrite(t *testing.T) {
	needNamespaces(t)
	for _, spray := range []string{"single", "rr"} {
		t.Run(spray, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := NewCluster(ctx, ClusterOptions{
				Net:   netlab.LeafSpineOptions{Prefix: "vsclt", Leaves: 2, HostsPerLeaf: 1, Spines: 2, HashSeed: 7},
				Spray: spray, Paths: 16,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			if len(c.Hosts) != 2 || c.Host(0, 0) != c.Hosts[0] || c.Host(1, 0) != c.Hosts[1] || c.Host(2, 0) != nil || c.Host(0, 1) != nil {
				t.Fatalf("hosts %v: Host(l, i) does not index them leaf by leaf", c.Hosts)
			}
			before, err := c.Fabric.LeafCounters(0)
			if err != nil {
				t.Fatal(err)
			}
			const n = 1 << 20
			src, dst := writeAcross(ctx, t, c.Host(0, 0), c.Host(1, 0), n)
			if !slices.Equal(src, dst) {
				i := 0
				for i < n && src[i] == dst[i] {
					i++
				}
				t.Fatalf("byte %d differs", i)
			}
			after, err := c.Fabric.LeafCounters(0)
			if err != nil {
				t.Fatal(err)
			}
			var sent []uint64
			var total uint64
			for s := range after {
				// Bytes, not packets: a GSO batch crosses the veths
				// as one packet.
				d := after[s].Sub(before[s]).TxBytes
				sent = append(sent, d)
				total += d
			}
			if total < n {
				t.Fatalf("leaf 0 sent %d bytes to the spines (%v), want at least %d", total, sent, n)
			}
			busy := 0
			for _, d := range sent {
				if d > total/10 {
					busy++
				}
			}
			want := map[string]int{"single": 1, "rr": 2}[spray]
			if busy != want {
				t.Errorf("%s: bytes per spine %v: %d spines carried the WRITE, want %d", spray, sent, busy, want)
			}
			if st := c.Host(1, 0).Fabric().Stats(); st.Connections != 1 || st.Received == 0 || st.Foreign != 0 {
				t.Errorf("receiving host's fabric %+v", st)
			}
		})
	}
}

// writeAcross is WriteAcross with VMs "ca" and "cb", failing the test on
// error.
func writeAcross(ctx context.Context, t *testing.T, a, b *Host, n int) (src, dst []byte) {
	t.Helper()
	src, dst, err := WriteAcross(ctx, a, b, [2]string{"ca", "cb"}, n)
	if err != nil {
		t.Fatal(err)
	}
	return src, dst
}
