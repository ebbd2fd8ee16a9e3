package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/internal/sim/hostsim"
	"github.com/vstellar/vstellar/internal/testkit/hosttest"
	"github.com/vstellar/vstellar/internal/testkit/verbstest"
	"github.com/vstellar/vstellar/virtio/abi"
)

// TestCtlInspectsRealDevice: against a daemon serving a VM whose driver
// built a CQ, a QP and an MR, show, qps and mrs print them, as tables and
// as JSON, and host and host nics describe the host.
func TestCtlInspectsRealDevice(t *testing.T) {
	ctx, h := hosttest.Start(t, 30*time.Second, hostsim.Options{})
	v, err := h.AddVM(ctx, "vm0", hostsim.VMOptions{MemSize: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	e, err := verbstest.New(ctx, v.Driver, verbstest.Options{CQSize: 8, BufSize: 1 << 20,
		Access: abi.AccessLocalWrite | abi.AccessRemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	qp, mr := e.QP, e.MR
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
