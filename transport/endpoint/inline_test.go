package endpoint_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/wire"
)

// TestSubmitSendsInline: a small message submitted while the loop is
// idle leaves from the submitter's goroutine: with the sender's loop not
// running at all, the peer still receives and commits it. A large one is
// the loop's to send; once the loop runs both complete OK, in order,
// with the right bytes at the peer.
func TestSubmitSendsInline(t *testing.T) {
	a, b := newHost(t), newHost(t)
	sink := &memSink{mem: make([]byte, 1<<20)}
	col := newCollector()
	connect(t, a, b, &memSink{}, sink, col.done, nil)
	b.run() // a's loop does not run yet
	small := []byte("8 bytes!")
	if err := a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: uint32(len(small)), Src: src(small), Token: 0}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for commits(sink) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the peer never committed the message: it was not sent inline")
		}
		time.Sleep(time.Millisecond)
	}
	// 10 packets of 4096 bytes: more than a submitter sends itself.
	big := bytes.Repeat([]byte{0xab}, 10*4096)
	before := a.ep.Stats().Sent
	if err := a.ep.Submit(1, transport.Message{Op: wire.OpWrite, Len: uint32(len(big)), Src: src(big), RAddr: 4096, Token: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := commits(sink); n != 1 {
		t.Fatalf("%d commits before the sender's loop ran, want 1 (the large message is the loop's to finish)", n)
	}
	if before != 1 {
		t.Fatalf("%d datagrams sent for the small message, want 1", before)
	}
	if sent := a.ep.Stats().Sent; sent != before {
		t.Fatalf("%d datagrams of the large message sent inline, want none", sent-before)
	}
	a.run()
	checkInOrder(t, col.wait(t, 2, 10*time.Second), 2, transport.StatusOK)
	b.stop() // its loop wrote sink.mem
	if !bytes.Equal(sink.mem[:len(small)], small) || !bytes.Equal(sink.mem[4096:4096+len(big)], big) {
		t.Fatal("wrong bytes at the peer")
	}
	if n := commits(sink); n != 2 {
		t.Fatalf("%d commits, want 2", n)
	}
}

// TestPostLeavesSendingToLoop: Post, whose callers wait for the
// completion themselves, hands the sending to the loop: with the loop not
// running, nothing leaves; once it runs the message completes.
func TestPostLeavesSendingToLoop(t *testing.T) {
	a, b := newHost(t), newHost(t)
	sink := &memSink{mem: make([]byte, 4096)}
	col := newCollector()
	connect(t, a, b, &memSink{}, sink, col.done, nil)
	b.run()
	if _, err := a.ep.Post(1, transport.Message{Op: wire.OpWrite, Len: 8, Src: src(make([]byte, 8)), Token: 0}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, sent := commits(sink), a.ep.Stats().Sent; n != 0 || sent != 0 {
		t.Fatalf("with the loop not running: %d commits at the peer, %d datagrams sent", n, sent)
	}
	a.run()
	checkInOrder(t, col.wait(t, 1, 10*time.Second), 1, transport.StatusOK)
	if n := commits(sink); n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}
}

func commits(s *memSink) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}
