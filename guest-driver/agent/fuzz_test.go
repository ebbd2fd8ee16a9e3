package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guest-driver/agent"
	"github.com/vstellar/vstellar/internal/sim/agentsim"
)

// script is a byte stream for the fuzz target: a scripted conn whose
// reads come from the input and whose writes are kept.
type script struct {
	r   io.Reader
	out bytes.Buffer
}

func (s *script) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *script) Write(p []byte) (int, error) { return s.out.Write(p) }
func (s *script) Close() error                { return nil }

// seedScripts are valid request streams, one per method and a whole
// session, for the fuzzer to mutate.
var seedScripts = []string{
	`{"method":"Agent.Info","params":[{}],"id":0}`,
	`{"method":"Agent.Setup","params":[{"buf_size":65536}],"id":1}
{"method":"Agent.Fill","params":[{"off":0,"len":4096,"seed":3}],"id":2}
{"method":"Agent.Digest","params":[{"off":0,"len":4096}],"id":3}
{"method":"Agent.Read","params":[{"off":8,"len":16}],"id":4}
{"method":"Agent.Store","params":[{"off":8,"data":"AQIDBA=="}],"id":5}
{"method":"Agent.PostRecv","params":[{"wrs":[{"wr_id":1,"sgl":[{"off":0,"len":64}]}]}],"id":6}
{"method":"Agent.PostSend","params":[{"wrs":[{"wr_id":2,"opcode":2,"sgl":[{"off":0,"len":64}],"signaled":true}]}],"id":7}
{"method":"Agent.Poll","params":[{"queue":"send","min":0,"max":4,"timeout_ms":1}],"id":8}
{"method":"Agent.RegMRAt","params":[{"gpa":4096,"len":4096,"access":1,"pages":true}],"id":9}
{"method":"Agent.Reset","params":[{}],"id":10}`,
	`{"method":"Agent.Setup","params":[{}],"id":1}
{"method":"Agent.Connect","params":[{"peer":{"GID":[254,128,0,0,0,0,0,0,0,0,0,0,0,0,0,1],"QPN":2,"PSN":5}}],"id":2}
{"method":"Agent.WriteBandwidth","params":[{"size":64,"window":2,"count":4,"remote_addr":4096,"rkey":256}],"id":3}
{"method":"Agent.PingPong","params":[{"local_off":64,"remote_addr":4096,"rkey":256,"count":2,"timeout_ms":5}],"id":4}
{"method":"Agent.Echo","params":[{"local_off":64,"remote_addr":4096,"rkey":256,"count":2,"timeout_ms":5}],"id":5}
{"method":"Agent.StreamStart","params":[{"size":64,"slots":4,"window":2,"remote_addr":4096,"rkey":256,"max_duration_ms":5}],"id":6}
{"method":"Agent.StreamStatus","params":[{}],"id":7}
{"method":"Agent.StreamStop","params":[{}],"id":8}`,
	`{"method":"Agent.Fill","params":[{"off":18446744073709551615,"len":2}],"id":1}`,
}

// FuzzServe feeds random request streams to a Service over a simulated
// device: every request must get an answer (an error for a bad one),
// never a panic, and Close must leave the device clean.
func FuzzServe(f *testing.F) {
	p := startSim(f, agentsim.Options{})
	for _, s := range seedScripts {
		f.Add([]byte(s + "\n"))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// Short bounds: a random request may ask for a long loop.
		s := agent.NewService(p.A.Driver, agent.Options{MaxWait: 20 * time.Millisecond, CommandTimeout: time.Second})
		conn := &script{r: bytes.NewReader(in)}
		if err := s.Serve(context.Background(), conn); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		// Whatever was answered is JSON-RPC.
		sc := bufio.NewScanner(&conn.out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var resp struct {
				ID     any             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  any             `json:"error"`
			}
			if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
				t.Fatalf("answer %q: %v", sc.Bytes(), err)
			}
		}
	})
}
