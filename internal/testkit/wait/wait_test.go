package wait

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and ends
// the goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run runs f with a recorder on a goroutine of its own (Fatalf ends it)
// and returns what it recorded.
func run(t *testing.T, f func(testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestForReturnsOnceTrue(t *testing.T) {
	n := 0
	msg := run(t, func(tb testing.TB) { For(tb, "three calls", func() bool { n++; return n == 3 }) })
	if msg != "" || n != 3 {
		t.Fatalf("failed %q after %d calls", msg, n)
	}
}

func TestWithinFailsAfterItsBound(t *testing.T) {
	start := time.Now()
	msg := run(t, func(tb testing.TB) { Within(tb, 20*time.Millisecond, "never", func() bool { return false }) })
	if !strings.Contains(msg, "timed out waiting for never") {
		t.Fatalf("message %q", msg)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("gave up after %v", d)
	}
}
