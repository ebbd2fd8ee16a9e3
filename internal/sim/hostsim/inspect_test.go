package hostsim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
)

// TestInspectAPI: after a cross-host WRITE, the management API shows each
// device's objects, traffic, control commands, QPs and MRs, and the host's
// fabric and pinned memory, consistent with what the guests did.
func TestInspectAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewPair(ctx, PairOptions{Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 1 << 20
	writeAcross(ctx, t, p.Hosts[0], p.Hosts[1], n)
	c := p.Hosts[0].Client()

	st, err := c.DeviceStatus(ctx, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Connected || st.Objects == nil || st.Objects.QPs != 1 || st.Objects.MRs != 1 || st.Objects.CQs != 1 || st.Objects.PDs != 1 {
		t.Fatalf("status %+v objects %+v", st.DeviceInfo, st.Objects)
	}
	if st.Traffic.BytesSent < n || st.Traffic.WQEs == 0 || st.Traffic.CQEs == 0 {
		t.Fatalf("traffic %+v", st.Traffic)
	}
	if st.Control.ByOpcode["create_qp"] != 1 || st.Control.ByOpcode["reg_mr"] != 1 || st.Control.ByStatus["ok"] == 0 {
		t.Fatalf("control %+v", st.Control)
	}
	if lat := st.Control.Latency["create_qp"]; lat[0] <= 0 || lat[1] < lat[0] {
		t.Fatalf("create_qp latency %v", lat)
	}
	if st.Memory.PinMode != "on-demand" || st.Memory.PinnedBytes == 0 || st.Vhost.Messages == 0 || st.Doorbells == "" || st.GID == "" {
		t.Fatalf("memory %+v vhost %+v doorbells %q gid %q", st.Memory, st.Vhost, st.Doorbells, st.GID)
	}

	qps, err := c.QPs(ctx, "ca", 0)
	if err != nil || qps.Total != 1 || len(qps.QPs) != 1 {
		t.Fatalf("qps %+v %v", qps, err)
	}
	peer, err := p.Hosts[1].Client().DeviceStatus(ctx, "cb")
	if err != nil {
		t.Fatal(err)
	}
	if q := qps.QPs[0]; q.State != "rts" || q.DestGID != peer.GID || q.DestQPN == 0 || q.SendCQN == 0 {
		t.Fatalf("qp %+v (peer gid %s)", q, peer.GID)
	}
	mrs, err := c.MRs(ctx, "ca", 1)
	if err != nil || mrs.Total != 1 || len(mrs.MRs) != 1 {
		t.Fatalf("mrs %+v %v", mrs, err)
	}
	if m := mrs.MRs[0]; m.Length != n || !m.Valid || m.Type != "guest-ram" || m.Access != "local_write|remote_write|remote_read|remote_atomic" {
		t.Fatalf("mr %+v", m)
	}

	h, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Devices != 1 || h.Memory.PinnedBytes < st.Memory.PinnedBytes || h.Fabric == nil || h.Fabric.Stats.Connections != 1 || h.Fabric.Stats.Sent == 0 {
		t.Fatalf("host %+v fabric %+v", h, h.Fabric)
	}

	paths, err := c.Paths(ctx)
	if err != nil || paths.Paths < 1 || len(paths.Active) == 0 || paths.Active[0].Samples == 0 || paths.Active[0].Mean <= 0 {
		t.Fatalf("paths %+v %v", paths, err)
	}
	nics, err := c.NICs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lo := false
	for _, i := range nics.Interfaces {
		lo = lo || i.Loopback
	}
	// The RDMA list is never null: empty, with rdma_error saying why
	// on a host without RDMA support.
	if !lo || nics.RDMA == nil {
		t.Fatalf("nics %+v", nics)
	}

	// Bad input: a bad limit, an unknown device, a bad name.
	if _, err := c.QPs(ctx, "ca", 1<<30); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("limit 2^30: %v", err)
	}
	if _, err := c.DeviceStatus(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("unknown device: %v", err)
	}
	if _, err := c.MRs(ctx, "bad!name", 0); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
}
