package realvm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// console collects what the guest writes to ttyS0 and lets callers wait
// for a piece of it.
type console struct {
	mu      sync.Mutex
	buf     []byte
	cursor  int           // where the next wait starts searching
	changed chan struct{} // closed and replaced on every append
	closed  bool          // no more output will come
	file    *os.File      // copy of everything, or nil
}

func newConsole(file *os.File) *console {
	return &console{changed: make(chan struct{}), file: file}
}

// run copies r into the console until EOF, then marks it closed.
func (c *console) run(r io.Reader) {
	b := make([]byte, 32<<10)
	for {
		n, err := r.Read(b)
		if n > 0 {
			c.mu.Lock()
			c.buf = append(c.buf, b[:n]...)
			if c.file != nil {
				c.file.Write(b[:n]) // best effort: the log is a convenience
			}
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	c.mu.Lock()
	c.closed = true
	if c.file != nil {
		c.file.Close()
	}
	close(c.changed)
	c.mu.Unlock()
}

// wait returns the line holding the first occurrence of s after the
// previous match, and moves past it. It fails when ctx ends or the output
// ends without s.
func (c *console) wait(ctx context.Context, s string) (string, error) {
	for {
		c.mu.Lock()
		if i := bytes.Index(c.buf[c.cursor:], []byte(s)); i >= 0 {
			at := c.cursor + i
			c.cursor = at + len(s)
			line := lineAt(c.buf, at)
			c.mu.Unlock()
			return line, nil
		}
		closed, changed := c.closed, c.changed
		c.mu.Unlock()
		if closed {
			return "", fmt.Errorf("console ended without %q", s)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no %q on the console: %w", s, context.Cause(ctx))
		case <-changed:
		}
	}
}

// lineAt returns the line of b holding offset at, without its newline.
func lineAt(b []byte, at int) string {
	start := bytes.LastIndexByte(b[:at], '\n') + 1
	end := len(b)
	if i := bytes.IndexByte(b[at:], '\n'); i >= 0 {
		end = at + i
	}
	return string(bytes.TrimRight(b[start:end], "\r"))
}

func (c *console) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// tail returns the last n lines, for error messages.
func (c *console) tail(n int) string {
	t := c.text()
	lines := bytes.Split([]byte(t), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
