package hostile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The management API (docs/operations.md, HTTP/1.1 on the daemon's unix
// socket) under bad clients: every bad request gets a JSON error with a
// clear status, no client can hold the server, and concurrent operations
// on one name leave a consistent state.

func TestManagementAPI(t *testing.T) {
	runCases(t, apiCases)
}

var apiCases = []hostileCase{
	{"malformed JSON", func(t *testing.T, e *env) {
		for _, body := range []string{`{"name":`, `{"name": 7}`, `[]`, `"x"`, `{"name":"a","nope":1}`,
			`{"name":"a"} {"name":"b"}`, "{\"name\":\"\xff\"}", `{"name":"a","limits":{"max_qp":-1}}`, ``} {
			wantAPIError(t, e, "POST", "/v1/devices", "application/json", body, http.StatusBadRequest)
		}
	}},
	{"bad device names", func(t *testing.T, e *env) {
		for _, name := range []string{"", ".", "..", "vstellard", "../x", "a/b", strings.Repeat("n", 65), "a b", "ä"} {
			b, _ := json.Marshal(map[string]string{"name": name})
			wantAPIError(t, e, "POST", "/v1/devices", "application/json", string(b), http.StatusBadRequest)
		}
		wantAPIError(t, e, "GET", "/v1/devices/..%2fvictim", "", "", http.StatusBadRequest)
		wantAPIError(t, e, "DELETE", "/v1/devices/nosuch", "", "", http.StatusNotFound)
	}},
	{"unknown routes and methods", func(t *testing.T, e *env) {
		wantAPIError(t, e, "GET", "/v2/devices", "", "", http.StatusNotFound)
		wantAPIError(t, e, "GET", "/", "", "", http.StatusNotFound)
		wantAPIError(t, e, "PUT", "/v1/devices", "application/json", "{}", http.StatusMethodNotAllowed)
		wantAPIError(t, e, "DELETE", "/v1/health", "", "", http.StatusMethodNotAllowed)
		wantAPIError(t, e, "PATCH", "/v1/devices/victim", "", "", http.StatusMethodNotAllowed)
		wantAPIError(t, e, "POST", "/v1/devices", "text/plain", `{"name":"x"}`, http.StatusUnsupportedMediaType)
	}},
	{"huge body", func(t *testing.T, e *env) {
		// 1 GiB announced; the answer must come after far less than that.
		c := dialAPI(t, e)
		fmt.Fprintf(c, "POST /v1/devices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"name\":\"", 1<<30)
		sent := make(chan int64, 1)
		go func() {
			chunk := []byte(strings.Repeat("a", 64<<10))
			var n int64
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			for n < 1<<30 {
				m, err := c.Write(chunk)
				n += int64(m)
				if err != nil {
					break
				}
			}
			sent <- n
		}()
		wantStatusLine(t, c, http.StatusRequestEntityTooLarge)
		c.Close()
		if n := <-sent; n >= 1<<30 {
			t.Errorf("the daemon read the whole 1 GiB body")
		} else {
			t.Logf("answered after %d KiB of the body", n>>10)
		}
	}},
	{"huge chunked body", func(t *testing.T, e *env) {
		c := dialAPI(t, e)
		fmt.Fprintf(c, "POST /v1/devices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
		go func() {
			chunk := fmt.Sprintf("%x\r\n%s\r\n", 32<<10, strings.Repeat(" ", 32<<10))
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			for range 1 << 15 { // 1 GiB
				if _, err := io.WriteString(c, chunk); err != nil {
					return
				}
			}
		}()
		wantStatusLine(t, c, http.StatusRequestEntityTooLarge)
	}},
	{"huge header", func(t *testing.T, e *env) {
		c := dialAPI(t, e)
		go func() {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("b", 4<<20))
		}()
		wantStatusLine(t, c, http.StatusRequestHeaderFieldsTooLarge)
	}},
	{"slow client", func(t *testing.T, e *env) {
		// A header that trickles one byte at a time: the server drops it
		// (ReadHeaderTimeout) and serves others meanwhile.
		c := dialAPI(t, e)
		start := time.Now()
		dropped := make(chan time.Duration, 1)
		go func() {
			req := "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 1000)
			for i := range len(req) {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write([]byte{req[i]}); err != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			dropped <- time.Since(start)
		}()
		api := apiClient(e.d.apiSocket())
		for time.Since(start) < 2*time.Second {
			if n, err := deviceCount(api); err != nil || n != 2 {
				t.Fatalf("GET /v1/devices during the slow client: %d, %v", n, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		select {
		case d := <-dropped:
			t.Logf("slow client dropped after %v", d.Round(100*time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Error("a client trickling its header was not dropped within 12 s")
		}
	}},
	{"many idle connections", func(t *testing.T, e *env) {
		var conns []net.Conn
		for range 200 {
			conns = append(conns, dialAPI(t, e))
		}
		if n, err := deviceCount(apiClient(e.d.apiSocket())); err != nil || n != 2 {
			t.Errorf("GET /v1/devices with 200 idle connections open: %d, %v", n, err)
		}
		for _, c := range conns {
			c.Close()
		}
	}},
	{"concurrent create and delete of one name", func(t *testing.T, e *env) {
		const name, workers, ops = "contested", 12, 10
		api := apiClient(e.d.apiSocket())
		var mu sync.Mutex
		var created, deleted int
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ops {
					var req *http.Request
					if (w+i)%2 == 0 {
						req, _ = http.NewRequest("POST", "http://vstellard/v1/devices", strings.NewReader(`{"name":"`+name+`"}`))
						req.Header.Set("Content-Type", "application/json")
					} else {
						req, _ = http.NewRequest("DELETE", "http://vstellard/v1/devices/"+name, nil)
					}
					resp, err := api.Do(req)
					if err != nil {
						t.Errorf("%s: %v", req.Method, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					switch resp.StatusCode {
					case http.StatusCreated:
						created++
					case http.StatusNoContent:
						deleted++
					case http.StatusConflict, http.StatusNotFound:
					default:
						t.Errorf("%s: %s", req.Method, resp.Status)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// Creates and deletes of one name alternate, whatever the order:
		// the device exists exactly if one more create than delete won.
		n, err := deviceCount(api)
		if err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(e.d.socket(name))
		t.Logf("%d creates and %d deletes succeeded; %d devices", created, deleted, n)
		switch created - deleted {
		case 0:
			if n != 2 || statErr == nil {
				t.Errorf("device count %d, socket %v: the last successful operation was a delete", n, statErr)
			}
		case 1:
			if n != 3 || statErr != nil {
				t.Errorf("device count %d, socket %v: the last successful operation was a create", n, statErr)
			}
			resp, err := api.Do(mustRequest("DELETE", "http://vstellard/v1/devices/"+name))
			if err != nil || resp.StatusCode != http.StatusNoContent {
				t.Fatalf("final DELETE: %v %v", resp, err)
			}
			resp.Body.Close()
		default:
			t.Errorf("%d creates and %d deletes succeeded on one name", created, deleted)
		}
		if _, err := os.Stat(e.d.socket(name)); err == nil {
			t.Error("the deleted device's socket is still there")
		}
	}},
}

func mustRequest(method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		panic(err)
	}
	return req
}

func dialAPI(t *testing.T, e *env) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", e.d.apiSocket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantAPIError sends one request and expects status with a JSON error body.
func wantAPIError(t *testing.T, e *env, method, path, ctype, body string, status int) {
	t.Helper()
	req, err := http.NewRequest(method, "http://vstellard"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := apiClient(e.d.apiSocket()).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var msg struct {
		Error string `json:"error"`
	}
	derr := json.NewDecoder(resp.Body).Decode(&msg)
	if resp.StatusCode != status || derr != nil || msg.Error == "" || strings.Contains(msg.Error, "\n") {
		t.Errorf("%s %s %q: %s %q (%v), want %d with a one-line JSON error", method, path, body, resp.Status, msg.Error, derr, status)
	}
}

// wantStatusLine reads an HTTP response's status line from a raw connection.
func wantStatusLine(t *testing.T, c net.Conn, status int) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Errorf("status %s, want %d", resp.Status, status)
	}
}
