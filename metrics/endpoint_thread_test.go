package metrics_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/metrics"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/transport/endpoint"
)

// threadSource is a daemon with one dedicated engine thread and a
// fabric whose endpoint polls.
type threadSource struct{ f *remote.Fabric }

func (threadSource) DeviceStates() []daemon.DeviceState { return nil }
func (threadSource) PinStats() pvdma.Stats              { return pvdma.Stats{} }
func (threadSource) PinLimit() uint64                   { return 0 }
func (s threadSource) Fabric() *remote.Fabric           { return s.f }
func (threadSource) DataThreads() (string, []engine.ThreadStats) {
	return "dedicated", []engine.ThreadStats{{CPU: 1, Engines: 2, Busy: time.Second}}
}

// TestEndpointThreadMetrics: a polling fabric endpoint counts as one
// more data-path thread, and its busy time is thread="endpoint"'s.
func TestEndpointThreadMetrics(t *testing.T) {
	f, err := remote.New(t.Context(), remote.Config{Listen: netip.MustParseAddrPort("127.0.0.1:0"),
		GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"), Secret: []byte("0123456789abcdef"), Poll: &endpoint.Polling{}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	t.Cleanup(func() { f.Close(); <-done })
	for _, _, busy := f.Poller(); busy == 0; _, _, busy = f.Poller() {
		time.Sleep(time.Millisecond)
	}
	fams := families(t, metrics.Registry(threadSource{f}))
	if got := value(t, fams, "vstellard_data_threads", "mode", "dedicated"); got != 2 {
		t.Fatalf("vstellard_data_threads = %v, want 2 (the engines' and the endpoint's)", got)
	}
	if got := value(t, fams, "vstellard_data_thread_busy_seconds_total", "thread", "endpoint", "cpu", "any"); got <= 0 {
		t.Fatalf("endpoint thread busy %vs", got)
	}
	if got := value(t, fams, "vstellard_data_thread_busy_seconds_total", "thread", "0", "cpu", "1"); got != 1 {
		t.Fatalf("engine thread busy %vs", got)
	}
}
