package virtio

import (
	"math/rand/v2"
	"testing"
)

// TestEventIdxScenario walks both notification directions through the
// spec's EVENT_IDX rule with hand-computed expectations.
func TestEventIdxScenario(t *testing.T) {
	e := newEnv(t, 8)
	drv, dev := e.pair(t, true)
	b := Buffer{r1Base, 8}
	add := func(n int) {
		for range n {
			if _, err := drv.Add(nil, []Buffer{b}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Kicks. Device enables notifications: avail_event = 0.
	if dev.EnableNotify() {
		t.Fatal("nothing pending yet")
	}
	add(3)
	if !drv.Publish() { // avail 0 -> 3 crosses 0
		t.Fatal("first publish must kick")
	}
	add(2)
	if drv.Publish() { // 3 -> 5, avail_event still 0
		t.Fatal("no kick expected while the device has not caught up")
	}
	var heads []uint16
	for range 5 {
		c, ok, err := dev.Pop()
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		heads = append(heads, c.Head)
	}
	// Pop kept avail_event at NextAvail = 5.
	add(1)
	if !drv.Publish() { // 5 -> 6 crosses 5
		t.Fatal("kick expected once the device caught up")
	}
	dev.DisableNotify() // with EVENT_IDX: avail_event stays at 5
	c, _, _ := dev.Pop()
	heads = append(heads, c.Head)
	add(1)
	if drv.Publish() { // 6 -> 7, event 5
		t.Fatal("no kick while the device has notifications off")
	}
	if !dev.EnableNotify() { // avail_event = 6, but 7 is published
		t.Fatal("EnableNotify must report the pending chain")
	}
	c, _, _ = dev.Pop()
	heads = append(heads, c.Head)

	// Interrupts. used_event starts at 0 (zeroed ring).
	dev.Push(heads[0], 0)
	dev.Push(heads[1], 0)
	if !dev.NeedsNotify() { // used 0 -> 2 crosses used_event 0
		t.Fatal("first completions must notify")
	}
	dev.Push(heads[2], 0)
	if dev.NeedsNotify() { // 2 -> 3, used_event 0
		t.Fatal("driver has not consumed; no notify")
	}
	if dev.NeedsNotify() {
		t.Fatal("nothing pushed since last call")
	}
	for range 3 {
		if _, _, ok := drv.GetUsed(); !ok {
			t.Fatal("GetUsed")
		}
	}
	// GetUsed moved used_event to 3.
	dev.Push(heads[3], 0)
	if !dev.NeedsNotify() {
		t.Fatal("3 -> 4 crosses used_event 3")
	}
	drv.DisableInterrupts() // used_event = lastUsed-1 = 2
	dev.Push(heads[4], 0)
	dev.Push(heads[5], 0)
	if dev.NeedsNotify() {
		t.Fatal("interrupts disabled")
	}
	if !drv.EnableInterrupts() { // used_event = 3, completions waiting
		t.Fatal("EnableInterrupts must report waiting completions")
	}
}

// TestEventIdxRandom checks NeedsNotify and Publish against the spec rule
// computed from the raw event fields, over a long random run.
func TestEventIdxRandom(t *testing.T) {
	e := newEnv(t, 16)
	drv, dev := e.pair(t, true)
	rng := rand.New(rand.NewPCG(3, 4))
	usedEvent := e.bytes(t, e.addrs.Avail+4+2*16, 2)
	availEvent := e.bytes(t, e.addrs.Used+4+8*16, 2)
	le16 := func(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
	within := func(ev, old, cur uint16) bool { return uint16(ev-old) < uint16(cur-old) }
	var outstanding []uint16
	kicks, irqs := 0, 0
	for step := 0; step < 20000; step++ {
		switch rng.IntN(6) {
		case 0:
			dev.DisableNotify()
		case 1:
			dev.EnableNotify()
		case 2:
			drv.DisableInterrupts()
		case 3:
			drv.EnableInterrupts()
		}
		n := rng.IntN(drv.NumFree() + 1)
		for range n {
			drv.Add([]Buffer{{r1Base, 4}}, nil)
		}
		before := drv.published
		ev := le16(availEvent)
		kick := drv.Publish()
		if want := n > 0 && within(ev, before, drv.published); kick != want {
			t.Fatalf("step %d: kick %v want %v (ev %d, %d->%d)", step, kick, want, ev, before, drv.published)
		}
		if kick {
			kicks++
		}
		for m := rng.IntN(5); m > 0; m-- {
			c, ok, err := dev.Pop()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			outstanding = append(outstanding, c.Head)
		}
		oldUsed := dev.signalled
		for m := rng.IntN(len(outstanding) + 1); m > 0; m-- {
			k := rng.IntN(len(outstanding))
			dev.Push(outstanding[k], 0)
			outstanding = append(outstanding[:k], outstanding[k+1:]...)
		}
		uev := le16(usedEvent)
		cur := dev.UsedIdx()
		irq := dev.NeedsNotify()
		if want := cur != oldUsed && within(uev, oldUsed, cur); irq != want {
			t.Fatalf("step %d: notify %v want %v", step, irq, want)
		}
		if irq {
			irqs++
		}
		for m := rng.IntN(5); m > 0; m-- {
			if _, _, ok := drv.GetUsed(); !ok {
				break
			}
		}
	}
	if kicks == 0 || irqs == 0 {
		t.Fatalf("degenerate run: %d kicks %d interrupts", kicks, irqs)
	}
	t.Logf("%d kicks, %d interrupts in 20000 steps", kicks, irqs)
}

// TestFlagNotifications: without EVENT_IDX the ring flags decide.
func TestFlagNotifications(t *testing.T) {
	e := newEnv(t, 8)
	drv, dev := e.pair(t, false)
	b := Buffer{r1Base, 8}
	drv.Add([]Buffer{b}, nil)
	if !drv.Publish() {
		t.Fatal("flags 0: driver must kick")
	}
	dev.DisableNotify()
	drv.Add([]Buffer{b}, nil)
	if drv.Publish() {
		t.Fatal("NO_NOTIFY set: no kick")
	}
	if drv.Publish() {
		t.Fatal("nothing added: no kick")
	}
	if !dev.EnableNotify() {
		t.Fatal("two chains pending")
	}
	drv.Add([]Buffer{b}, nil)
	if !drv.Publish() {
		t.Fatal("NO_NOTIFY cleared: kick")
	}
	c1, _, _ := dev.Pop()
	c2, _, _ := dev.Pop()
	c3, _, _ := dev.Pop()
	if dev.EnableNotify() {
		t.Fatal("nothing pending")
	}
	dev.Push(c1.Head, 0)
	if !dev.NeedsNotify() {
		t.Fatal("flags 0: device must notify")
	}
	drv.DisableInterrupts()
	dev.Push(c2.Head, 0)
	if dev.NeedsNotify() {
		t.Fatal("NO_INTERRUPT: no notify")
	}
	if !drv.EnableInterrupts() {
		t.Fatal("completions waiting")
	}
	dev.Push(c3.Head, 0)
	if !dev.NeedsNotify() {
		t.Fatal("NO_INTERRUPT cleared: notify")
	}
	if dev.NeedsNotify() {
		t.Fatal("nothing new: no notify")
	}
	// used->flags is 0 or 1, never anything else.
	if f := e.bytes(t, e.addrs.Used, 2); f[0]|f[1] > 1 {
		t.Fatalf("used flags %v", f)
	}
}
