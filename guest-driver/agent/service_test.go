package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/sim/agentsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Every number in a request is checked: a bad request gets an error
// that says what was wrong, and the agent goes on serving.
func TestBadRequestsGetErrors(t *testing.T) {
	p := startSim(t, agentsim.Options{})
	ctx := testCtx(t, time.Minute)
	a := p.A.Client
	if err := a.Fill(ctx, 0, 8, 1); err == nil || !strings.Contains(err.Error(), "not set up") {
		t.Fatalf("Fill before Setup: %v", err)
	}
	if _, err := a.Setup(ctx, agent.SetupArgs{BufSize: 1 << 40}); err == nil {
		t.Fatal("a 1 TiB buffer was accepted")
	}
	if _, err := a.Setup(ctx, agent.SetupArgs{Access: abi.AccessRemoteWrite}); err == nil {
		t.Fatal("remote write without local write was accepted")
	}
	sr, err := a.Setup(ctx, agent.SetupArgs{BufSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Setup(ctx, agent.SetupArgs{}); err == nil {
		t.Fatal("second Setup")
	}
	const huge = ^uint64(0)
	bad := []struct {
		name string
		call func() error
		want string // in the message
	}{
		{"fill past the end", func() error { return a.Fill(ctx, 64<<10-4, 8, 1) }, "buffer range"},
		{"fill wrapping", func() error { return a.Fill(ctx, huge, 2, 1) }, "buffer range"},
		{"digest too long", func() error { _, err := a.Digest(ctx, 0, huge); return err }, "buffer range"},
		{"read above MaxIO", func() error { _, err := a.Read(ctx, 0, agent.MaxIO+1); return err }, "at most"},
		{"store above MaxIO", func() error { return a.Store(ctx, 0, make([]byte, agent.MaxIO+1)) }, "at most"},
		{"store past the end", func() error { return a.Store(ctx, 64<<10-1, []byte{1, 2}) }, "buffer range"},
		{"no work requests", func() error { return a.PostSend(ctx) }, "work requests"},
		{"SGE past the end", func() error {
			return a.PostSend(ctx, agent.SendArgs{Opcode: abi.WRSend, SGL: []agent.Segment{{Off: 60 << 10, Len: 8 << 10}}})
		}, "SGE 0"},
		{"too many SGEs", func() error {
			return a.PostRecv(ctx, agent.RecvArgs{SGL: make([]agent.Segment, agent.MaxSGL+1)})
		}, "SGEs"},
		{"undefined opcode", func() error { return a.PostSend(ctx, agent.SendArgs{Opcode: 200}) }, "invalid work request"},
		{"atomic without its SGE", func() error { return a.PostSend(ctx, agent.SendArgs{Opcode: abi.WRAtomicFetchAdd}) }, "8-byte SGE"},
		{"poll of nothing", func() error { _, err := a.Poll(ctx, agent.PollArgs{Queue: agent.SendQueue}); return err }, "poll of 0"},
		{"poll of a queue that is not", func() error { _, err := a.Poll(ctx, agent.PollArgs{Queue: "x", Max: 1}); return err }, "queue"},
		{"poll forever", func() error {
			_, err := a.Poll(ctx, agent.PollArgs{Queue: agent.RecvQueue, Max: 1, TimeoutMs: 1 << 30})
			return err
		}, "exceeds"},
		{"bandwidth without bound", func() error { _, err := a.WriteBandwidth(ctx, agent.BandwidthArgs{Size: 8, Window: 1}); return err }, "neither"},
		{"bandwidth past the end", func() error {
			_, err := a.WriteBandwidth(ctx, agent.BandwidthArgs{LocalOff: 64 << 10, Size: 8, Window: 1, Count: 1})
			return err
		}, "buffer range"},
		{"ping without round trips", func() error { _, err := a.PingPong(ctx, agent.PingArgs{TimeoutMs: 10}); return err }, "round trips"},
		{"ping slot unaligned", func() error {
			_, err := a.PingPong(ctx, agent.PingArgs{LocalOff: 3, Count: 1, TimeoutMs: 10})
			return err
		}, "aligned"},
		{"echo without timeout", func() error { _, err := a.Echo(ctx, agent.EchoArgs{Count: 1}); return err }, "timeout"},
		{"stream window above its slots", func() error {
			return a.StreamStart(ctx, agent.StreamArgs{Size: 64, Slots: 2, Window: 3})
		}, "window"},
		{"stream past the end", func() error {
			return a.StreamStart(ctx, agent.StreamArgs{Size: 64 << 10, Slots: 2, Window: 1})
		}, "buffer range"},
		{"stream status without a stream", func() error { _, err := a.StreamStatus(ctx); return err }, "no stream"},
		{"stream stop without a stream", func() error { _, err := a.StreamStop(ctx); return err }, "no stream"},
		{"MR of nothing", func() error { _, err := a.RegMRAt(ctx, agent.RegMRAtArgs{GPA: 4096}); return err }, "MR of 0"},
		{"MR wrapping", func() error { _, err := a.RegMRAt(ctx, agent.RegMRAtArgs{GPA: huge - 10, Len: 4096}); return err }, "wraps"},
		{"contiguous MR above the buffer", func() error {
			_, err := a.RegMRAt(ctx, agent.RegMRAtArgs{GPA: sr.MR.Addr, Len: 1 << 20})
			return err
		}, "at most the buffer"},
		{"connect to a PSN of 32 bits", func() error {
			peer := sr
			peer.Endpoint.PSN = 1 << 30
			return a.Connect(ctx, peer)
		}, "24 bits"},
	}
	for _, b := range bad {
		err := b.call()
		var re *agent.RemoteError
		if !errors.As(err, &re) || !strings.Contains(re.Msg, b.want) {
			t.Errorf("%s: %v, want a guest error saying %q", b.name, err, b.want)
		}
	}
	// A request the device refuses carries its status: an MR outside
	// the guest's RAM.
	if _, err := a.RegMRAt(ctx, agent.RegMRAtArgs{GPA: 1 << 45, Len: 4096, Access: abi.AccessLocalWrite}); !errors.Is(err, abi.StatusBadAddress) {
		t.Errorf("MR beyond RAM: %v", err)
	}
	// Still serving, and the buffer is intact.
	if err := a.Fill(ctx, 0, 64<<10, 9); err != nil {
		t.Fatal(err)
	}
	if d, err := a.Digest(ctx, 0, 64<<10); err != nil || d != agent.PatternSHA256(9, 64<<10) {
		t.Fatalf("digest %s %v", d, err)
	}
}

// A loop owns the send queue; the host's own posts and polls of it wait
// until it is over, and a Reset stops it.
func TestLoopOwnsSendQueue(t *testing.T) {
	p := startSim(t, agentsim.Options{})
	ctx := testCtx(t, time.Minute)
	pr, err := agent.NewPair(ctx, p.A.Client, p.B.Client, agent.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := p.A.Client
	if err := a.StreamStart(ctx, agent.StreamArgs{Size: 4096, Slots: 4, Window: 2, RemoteAddr: pr.SB.MR.Addr, RKey: pr.SB.MR.RKey}); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"post": a.PostSend(ctx, agent.SendArgs{Opcode: abi.WRSend}),
		"poll": func() error { _, err := a.Poll(ctx, agent.PollArgs{Queue: agent.SendQueue, Max: 1}); return err }(),
		"bandwidth": func() error {
			_, err := a.WriteBandwidth(ctx, agent.BandwidthArgs{Size: 8, Window: 1, Count: 1})
			return err
		}(),
		"stream": a.StreamStart(ctx, agent.StreamArgs{Size: 4096, Slots: 4, Window: 2}),
		"setup":  func() error { _, err := a.Setup(ctx, agent.SetupArgs{}); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), "busy: stream running") {
			t.Errorf("%s during a stream: %v", name, err)
		}
	}
	st, err := a.StreamStatus(ctx)
	if err != nil || !st.Running || st.Completed == 0 {
		t.Fatalf("status %+v %v", st, err)
	}
	// The receive side is not the loop's.
	if _, err := a.Poll(ctx, agent.PollArgs{Queue: agent.RecvQueue, Max: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StreamStatus(ctx); err == nil {
		t.Fatal("stream survived Reset")
	}
	if info, err := a.Info(ctx); err != nil || info.SetUp {
		t.Fatalf("after Reset: %+v %v", info, err)
	}
}

// Requests that are not what the methods take: wrong types, unknown
// methods, missing parameters. Each gets an error answer with its id and
// the stream goes on; bytes that are not JSON end it.
func TestMalformedJSONRPC(t *testing.T) {
	p := startSim(t, agentsim.Options{})
	s := agent.NewService(p.A.Driver, agent.Options{})
	t.Cleanup(func() { s.Close(context.Background()) })
	guest, host := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), guest) }()
	in := bufio.NewReader(host)
	reqs := []struct{ line, wantErr string }{
		{`{"method":"Agent.Fill","params":[{"off":"x"}],"id":1}`, "cannot unmarshal"},
		{`{"method":"Agent.Nope","params":[{}],"id":2}`, "can't find method"},
		{`{"method":"Nope","params":[{}],"id":3}`, "ill-formed"},
		{`{"method":"Agent.Read","params":[{"off":1,"len":18446744073709551615}],"id":4}`, "at most"},
		{`{"method":"Agent.Setup","params":[{"buf_size":-1}],"id":5}`, "cannot unmarshal"},
		{`{"method":"Agent.Digest","id":6}`, "missing params"},
		{`{"method":"Agent.Digest","params":[{}],"id":8}`, "not set up"},
		{`{"method":"Agent.Info","params":[{}],"id":7}`, ""},
	}
	for _, r := range reqs {
		if _, err := host.Write([]byte(r.line + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := in.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  any             `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatalf("%s: answer %q: %v", r.line, line, err)
		}
		msg, _ := resp.Error.(string)
		if r.wantErr == "" && resp.Error != nil || !strings.Contains(msg, r.wantErr) {
			t.Errorf("%s: answer %s", r.line, line)
		}
	}
	host.Write([]byte("}{ not json\n"))
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return on bytes that are not JSON")
	}
}

// A call whose ctx ends returns at once; the guest's late answer is
// dropped and the Client goes on working.
func TestClientDeadline(t *testing.T) {
	p := startSim(t, agentsim.Options{})
	ctx := testCtx(t, time.Minute)
	a := p.A.Client
	if _, err := a.Setup(ctx, agent.SetupArgs{BufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := a.Poll(short, agent.PollArgs{Queue: agent.RecvQueue, Min: 1, Max: 1, TimeoutMs: 300})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 250*time.Millisecond {
		t.Fatalf("Poll past its deadline: %v after %v", err, time.Since(t0))
	}
	time.Sleep(400 * time.Millisecond) // the guest answers meanwhile
	if info, err := a.Info(ctx); err != nil || !info.SetUp {
		t.Fatalf("Info after a dropped answer: %+v %v", info, err)
	}
}
