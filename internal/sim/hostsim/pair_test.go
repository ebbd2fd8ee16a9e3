package hostsim

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestPairLoopback: the fallback a machine without namespaces gets (the
// demo's two hosts without root): two daemons on loopback, each with its
// fabric, and a WRITE from a VM on one into a VM on the other.
func TestPairLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewPair(ctx, PairOptions{Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Bed != nil || p.Where != "loopback" {
		t.Fatalf("bed %v, where %q", p.Bed, p.Where)
	}
	src, dst := writeAcross(ctx, t, p.Hosts[0], p.Hosts[1], 1<<20)
	if !bytes.Equal(dst, src) {
		t.Fatal("the WRITE's bytes differ at the destination")
	}
	if st := p.Hosts[1].Fabric().Stats(); st.Connections != 1 || st.Received == 0 {
		t.Fatalf("host 2 fabric %+v", st)
	}
}
