package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestCtlInspectsRealDevice: against a daemon serving a VM whose driver
// built a CQ, a QP and an MR, show, qps and mrs print them, as tables and
// as JSON, and host and host nics describe the host.
func TestCtlInspectsRealDevice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := hostsim.New(ctx, hostsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	v, err := h.AddVM(ctx, "vm0", hostsim.VMOptions{MemSize: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := v.Driver
	pd, err := d.AllocPD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(ctx, guestdriver.QPInit{SendCQ: cq, RecvCQ: cq,
		Cap: guestdriver.QPCap{SQSize: 8, RQSize: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.Alloc(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(ctx, buf, abi.AccessLocalWrite|abi.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	sock := h.API()

	code, out, errOut := ctl(t, sock, "devices", "show", "vm0")
	for _, want := range []string{"connected:", "yes", "1 PDs, 1 CQs, 1 QPs, 0 SRQs, 1 MRs", "mode on-demand", "control commands:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("show: %d lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	code, out, _ = ctl(t, sock, "devices", "qps", "vm0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "QPN") || !strings.HasPrefix(strings.Fields(lines[1])[0], itoa(qp.Num())) ||
		strings.Fields(lines[1])[1] != "reset" {
		t.Fatalf("qps: %d\n%s", code, out)
	}
	code, out, _ = ctl(t, sock, "--json", "devices", "mrs", "vm0")
	var mrs api.MRList
	if code != 0 || json.Unmarshal([]byte(out), &mrs) != nil || mrs.Total != 1 || mrs.MRs[0].Length != 1<<20 ||
		mrs.MRs[0].Access != "local_write|remote_read" || mrs.MRs[0].Key != "0x"+hex(mr.RKey()) {
		t.Fatalf("mrs --json: %d %s", code, out)
	}
	code, out, _ = ctl(t, sock, "host")
	if code != 0 || !strings.Contains(out, "devices:") || !strings.Contains(out, "fabric:") || !strings.Contains(out, "none") {
		t.Fatalf("host: %d\n%s", code, out)
	}
	code, out, _ = ctl(t, sock, "host", "nics")
	if code != 0 || !strings.Contains(out, "INTERFACE") || !strings.Contains(out, "loopback") || !strings.Contains(out, "RDMA") {
		t.Fatalf("host nics: %d\n%s", code, out)
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
func hex(n uint32) string  { return strconv.FormatUint(uint64(n), 16) }
