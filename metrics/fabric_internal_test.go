package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vstellar/vstellar/fabric/remote"
)

// The fabric's counters reach their metrics: each distinct value lands on
// the metric and label it belongs to (a swapped or missing field shows).
func TestCollectFabric(t *testing.T) {
	c := New(nil)
	st := remote.Stats{Connections: 1, Sent: 2, Received: 3, SendErrors: 4, Malformed: 5, UnknownConn: 6, Foreign: 7,
		Refused: 7 + 8, Busy: 9, Retransmits: 10, SpuriousRetransmits: 11, Timeouts: 12, BusyNaksSent: 13, BusyNaksReceived: 14}
	ch := make(chan prometheus.Metric, 64)
	c.collectFabric(ch, st)
	close(ch)
	got := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		name := m.Desc().String()
		name = name[strings.Index(name, `fqName: "`)+9:]
		name = name[:strings.IndexByte(name, '"')]
		for _, l := range pb.GetLabel() {
			name += "{" + l.GetValue() + "}"
		}
		got[name] = pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	for name, want := range map[string]float64{
		"vstellard_fabric_connections":                                 1,
		"vstellard_fabric_datagrams_sent_total":                        2,
		"vstellard_fabric_datagrams_received_total":                    3,
		"vstellard_fabric_send_errors_total":                           4,
		"vstellard_fabric_dropped_datagrams_total{malformed}":          5,
		"vstellard_fabric_dropped_datagrams_total{unknown_connection}": 6,
		"vstellard_fabric_dropped_datagrams_total{foreign}":            7,
		"vstellard_fabric_dropped_datagrams_total{invalid}":            8,
		"vstellard_fabric_dropped_datagrams_total{device_busy}":        9,
		"vstellard_fabric_retransmits_total":                           10,
		"vstellard_fabric_spurious_retransmits_total":                  11,
		"vstellard_fabric_timeouts_total":                              12,
		"vstellard_fabric_busy_naks_total{sent}":                       13,
		"vstellard_fabric_busy_naks_total{received}":                   14,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
