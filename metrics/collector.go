package metrics

import (
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/latency"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

const namespace = "vstellard"

// Source is what the Collector reads; *daemon.Manager is one.
type Source interface {
	DeviceStates() []daemon.DeviceState
	PinStats() pvdma.Stats
	PinLimit() uint64
	// Fabric is the cross-host fabric, nil without one.
	Fabric() *remote.Fabric
	// DataThreads says how the data path polls and what its threads did.
	DataThreads() (mode string, threads []engine.ThreadStats)
}

// Collector is a prometheus.Collector for one daemon.
type Collector struct {
	src Source

	devices, connected, info                                  *prometheus.Desc
	hostPinned, hostBudget, pinDuration                       *prometheus.Desc
	perDevice                                                 []deviceMetric
	commandDuration                                           *prometheus.Desc
	fabricConns, fabricSent, fabricReceived, fabricSendErrors *prometheus.Desc
	fabricDropped                                             *prometheus.Desc
	fabricRetransmits, fabricTimeouts, fabricPathRTT          *prometheus.Desc
	fabricSpurious, fabricBusyNaks                            *prometheus.Desc
	dataThreads, threadBusy, threadEngines                    *prometheus.Desc
}

// deviceMetric is a per-device metric read from a device's state.
// fromModel metrics are read from the device model's snapshot, which a
// device being destroyed does not have.
type deviceMetric struct {
	desc      *prometheus.Desc
	typ       prometheus.ValueType
	fromModel bool
	value     func(s *daemon.DeviceState) float64
}

// New returns a Collector reading src.
func New(src Source) *Collector {
	dev := []string{"device"}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	c := &Collector{
		src:         src,
		devices:     desc("devices", "Devices the daemon serves."),
		connected:   desc("device_connected", "1 while a VMM front-end is connected to the device.", dev...),
		info:        desc("device_info", "A device's identity (value 1).", "device", "node_guid", "gid", "tenant"),
		hostPinned:  desc("host_pinned_bytes", "Guest memory pinned for DMA, all devices together."),
		hostBudget:  desc("host_pin_budget_bytes", "The host's pinned-memory budget (0: none)."),
		pinDuration: desc("pin_duration_seconds", "Time to pin a 2 MiB chunk (or, pinning all, a region), all devices together."),
		commandDuration: desc("control_command_duration_seconds",
			"Time to execute a control command, by opcode, all devices together.", "opcode"),
		fabricConns:      desc("fabric_connections", "Live QP connections on the cross-host fabric."),
		fabricSent:       desc("fabric_datagrams_sent_total", "Datagrams the fabric sent."),
		fabricReceived:   desc("fabric_datagrams_received_total", "Datagrams the fabric received."),
		fabricSendErrors: desc("fabric_send_errors_total", "Datagrams the kernel would not send."),
		fabricDropped: desc("fabric_dropped_datagrams_total",
			"Datagrams received and dropped, by reason: malformed, unknown_connection, foreign (wrong tenant or token: forged or misdirected), invalid (contradicting the connection's state), device_busy (data for a device in a control change, resent by its sender).", "reason"),
		fabricRetransmits: desc("fabric_retransmits_total", "Data packets sent again."),
		fabricSpurious: desc("fabric_spurious_retransmits_total",
			"Retransmissions the sender found unneeded: the first copy was delivered (reordering taken for loss)."),
		fabricBusyNaks: desc("fabric_busy_naks_total",
			"BUSY NAKs, by direction: sent for data a device in a control change could not take, received from such a peer (the sender waits and probes; it is not a loss).", "direction"),
		fabricTimeouts: desc("fabric_timeouts_total", "Retransmission timeouts."),
		dataThreads: desc("data_threads",
			"Threads polling the devices' engines, by mode: dedicated (spinning on OS threads of their own), yielding (a goroutine per engine: too few cores or processors to spare).", "mode"),
		threadBusy: desc("data_thread_busy_seconds_total",
			"Time a dedicated data-path thread spent polling with an engine awake: the CPU it burned (rate() of it is the thread's busy ratio).", "thread", "cpu"),
		threadEngines: desc("data_thread_engines", "Engines placed on a dedicated data-path thread.", "thread", "cpu"),
		fabricPathRTT: desc("fabric_path_rtt_seconds", "Round-trip times measured on each path (UDP source port index).", "path"),
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	add := func(name, help string, typ prometheus.ValueType, v func(s *daemon.DeviceState) float64) {
		c.perDevice = append(c.perDevice, deviceMetric{desc(name, help, dev...), typ, false, v})
	}
	model := func(name, help string, typ prometheus.ValueType, v func(s *daemon.DeviceState) float64) {
		c.perDevice = append(c.perDevice, deviceMetric{desc(name, help, dev...), typ, true, v})
	}
	f := func(v uint64) float64 { return float64(v) }
	model("qps", "Live queue pairs.", gauge, func(s *daemon.DeviceState) float64 { return float64(s.Model.Objects.QPs) })
	model("cqs", "Live completion queues.", gauge, func(s *daemon.DeviceState) float64 { return float64(s.Model.Objects.CQs) })
	model("srqs", "Live shared receive queues.", gauge, func(s *daemon.DeviceState) float64 { return float64(s.Model.Objects.SRQs) })
	model("mrs", "Live memory regions.", gauge, func(s *daemon.DeviceState) float64 { return float64(s.Model.Objects.MRs) })
	model("pds", "Live protection domains.", gauge, func(s *daemon.DeviceState) float64 { return float64(s.Model.Objects.PDs) })
	model("pinned_bytes", "Guest memory the device keeps pinned for DMA.", gauge, func(s *daemon.DeviceState) float64 { return f(s.Model.Pins.PinnedBytes) })
	model("pins_total", "2 MiB chunks pinned.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Pins.Pins) })
	model("unpins_total", "2 MiB chunks unpinned.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Pins.Unpins) })
	model("pin_failures_total", "Pins refused by a budget or the pinner.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Pins.PinFailures) })
	model("pin_evictions_total", "Idle chunks released to stay within a budget.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Pins.Evictions) })
	model("pin_cache_hits_total", "DMA chunk lookups that found the chunk pinned.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Pins.Hits) })
	model("pin_cache_misses_total", "DMA chunk lookups that had to pin the chunk.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Pins.Misses) })
	model("translation_misses_total", "DMA translations the eMTT refused (key, PD, access or range).", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.TranslationMisses) })
	model("control_commands_total", "Control commands answered.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Control.Commands) })
	model("control_command_failures_total", "Control commands answered with a status other than OK.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Control.Failed) })
	model("work_requests_total", "Work requests executed.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.WQEs) })
	model("completions_total", "Completions written.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.CQEs) })
	model("error_completions_total", "Completions with an error status.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.ErrorCQEs) })
	model("sent_bytes_total", "Payload bytes the device's QPs sent (WRITE, SEND, READ responses it served).", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.BytesSent) })
	model("received_bytes_total", "Payload bytes placed in the device's guest memory.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.BytesReceived) })
	model("retries_total", "Requests retried after a transport timeout.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.Retries) })
	model("rnr_naks_total", "Receiver-not-ready NAKs received.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.RNRNaks) })
	model("doorbell_wakeups_total", "Times the device's engine was woken from idle.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Engine.Wakeups) })
	model("data_path_busy_seconds_total", "Time a data-path thread spent polling the device's engine (working, or spinning for more before it sleeps).", counter, func(s *daemon.DeviceState) float64 { return s.Model.Engine.Awake.Seconds() })
	model("events_dropped_total", "Asynchronous events lost to a full event queue.", counter, func(s *daemon.DeviceState) float64 { return f(s.Model.Control.EventsDropped) })
	add("vhost_messages_total", "vhost-user messages served.", counter, func(s *daemon.DeviceState) float64 { return f(s.Vhost.Messages) })
	add("vhost_kicks_total", "Virtqueue kicks received.", counter, func(s *daemon.DeviceState) float64 { return f(s.Vhost.Kicks) })
	add("vhost_protocol_errors_total", "Front-end connections ended by malformed vhost-user input.", counter, func(s *daemon.DeviceState) float64 { return f(s.Vhost.ProtocolErrors) })
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.devices, c.connected, c.info, c.hostPinned, c.hostBudget, c.pinDuration,
		c.commandDuration, c.fabricConns, c.fabricSent, c.fabricReceived, c.fabricSendErrors, c.fabricDropped,
		c.fabricRetransmits, c.fabricTimeouts, c.fabricPathRTT, c.fabricSpurious, c.fabricBusyNaks,
		c.dataThreads, c.threadBusy, c.threadEngines} {
		ch <- d
	}
	for _, m := range c.perDevice {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	states := c.src.DeviceStates()
	ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(len(states)))
	byOpcode := map[string]latency.Histogram{}
	for i := range states {
		s := &states[i]
		name := s.Info.Name
		ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, b2f(s.Info.Connected), name)
		for _, m := range c.perDevice {
			if !m.fromModel || s.Model != nil {
				ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(s), name)
			}
		}
		if s.Model == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, name, abi.FormatGUID(s.Model.NodeGUID),
			netip.AddrFrom16(s.Model.GID).String(), strconv.FormatUint(uint64(s.Info.Tenant), 10))
		for op, h := range s.Model.Control.Latency {
			sum := byOpcode[daemon.OpcodeName(op)]
			sum.Add(h)
			byOpcode[daemon.OpcodeName(op)] = sum
		}
	}
	for op, h := range byOpcode {
		ch <- histogram(c.commandDuration, h, op)
	}
	p := c.src.PinStats()
	ch <- prometheus.MustNewConstMetric(c.hostPinned, prometheus.GaugeValue, float64(p.PinnedBytes))
	ch <- prometheus.MustNewConstMetric(c.hostBudget, prometheus.GaugeValue, float64(c.src.PinLimit()))
	ch <- histogram(c.pinDuration, p.PinLatency)
	if f := c.src.Fabric(); f != nil {
		c.collectFabric(ch, f.Stats())
	}
	c.collectThreads(ch)
}

// collectThreads reports the data-path threads. Only dedicated threads
// are reported one by one: a yielding one lives as long as its engine,
// whose own busy time is data_path_busy_seconds_total.
func (c *Collector) collectThreads(ch chan<- prometheus.Metric) {
	mode, threads := c.src.DataThreads()
	ch <- prometheus.MustNewConstMetric(c.dataThreads, prometheus.GaugeValue, float64(len(threads)), mode)
	if mode != "dedicated" {
		return
	}
	for i, t := range threads {
		thread, cpu := strconv.Itoa(i), "any"
		if t.CPU >= 0 {
			cpu = strconv.Itoa(t.CPU)
		}
		ch <- prometheus.MustNewConstMetric(c.threadBusy, prometheus.CounterValue, t.Busy.Seconds(), thread, cpu)
		ch <- prometheus.MustNewConstMetric(c.threadEngines, prometheus.GaugeValue, float64(t.Engines), thread, cpu)
	}
}

func (c *Collector) collectFabric(ch chan<- prometheus.Metric, st remote.Stats) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	ch <- prometheus.MustNewConstMetric(c.fabricConns, prometheus.GaugeValue, float64(st.Connections))
	counter(c.fabricSent, st.Sent)
	counter(c.fabricReceived, st.Received)
	counter(c.fabricSendErrors, st.SendErrors)
	counter(c.fabricDropped, st.Malformed, "malformed")
	counter(c.fabricDropped, st.UnknownConn, "unknown_connection")
	counter(c.fabricDropped, st.Foreign, "foreign")
	counter(c.fabricDropped, st.Refused-st.Foreign, "invalid")
	counter(c.fabricDropped, st.Busy, "device_busy")
	counter(c.fabricRetransmits, st.Retransmits)
	counter(c.fabricSpurious, st.SpuriousRetransmits)
	counter(c.fabricBusyNaks, st.BusyNaksSent, "sent")
	counter(c.fabricBusyNaks, st.BusyNaksReceived, "received")
	counter(c.fabricTimeouts, st.Timeouts)
	for _, p := range st.Paths {
		ch <- histogram(c.fabricPathRTT, p.RTT, strconv.Itoa(p.Path))
	}
}

// histogram converts a latency histogram to a Prometheus one in seconds
// (cumulative buckets; the +Inf bucket is implied by the count).
func histogram(d *prometheus.Desc, h latency.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, latency.Buckets-1)
	var cum uint64
	for i := range latency.Buckets - 1 {
		cum += h.Counts[i]
		buckets[latency.Bound(i).Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
