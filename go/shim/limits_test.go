// Answers no shim gives, from a raw listener: endless, huge or slow bodies, huge heads and frame
// lengths. Each call must return a clear error (or, for a drain, nothing) having read at most its
// limit plus a buffer's worth from the connection.

package shim_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

// slack is what may be read past a limit: the transport's and the decoder's buffers.
const slack = 256 << 10

// hostile serves every connection by reading one request, writing head, then body over and over
// (every pause, if set) until the client goes away or after times writes (0: forever).
type hostile struct {
	head  string
	body  []byte
	times int
	pause time.Duration
}

func (h hostile) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
					return
				}
				if _, err := conn.Write([]byte(h.head)); err != nil {
					return
				}
				for i := 0; h.times == 0 || i < h.times; i++ {
					if _, err := conn.Write(h.body); err != nil {
						return
					}
					if h.pause > 0 {
						time.Sleep(h.pause)
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// countingClient is a Client of url whose connections count the bytes read from them.
func countingClient(t *testing.T, url string) (*shim.Client, *atomic.Int64) {
	t.Helper()
	c, err := shim.New(url, "token")
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	tr := c.HTTP.Transport.(*http.Transport).Clone()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, read: &read}, nil
	}
	c.HTTP = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return c, &read
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// within runs call under a 20 s context and fails if it takes more than max.
func within(t *testing.T, max time.Duration, call func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	if took := time.Since(start); took > max {
		t.Fatalf("the call took %v (error %v), want under %v", took, err, max)
	}
	return err
}

const chunked = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"

// chunk is data as one chunk of a chunked body.
func chunk(data string) []byte { return []byte(fmt.Sprintf("%x\r\n%s\r\n", len(data), data)) }

func wantLimit(t *testing.T, err error, what string) {
	t.Helper()
	var le *shim.LimitError
	if !errors.As(err, &le) || !errors.Is(err, shim.ErrAnswerTooLarge) {
		t.Fatalf("%s: err = %v, want a *LimitError", what, err)
	}
	t.Logf("%s: %v", what, err)
}

func TestEndlessJSONAnswerStopsAtTheLimit(t *testing.T) {
	url := hostile{head: chunked + string(chunk(`{"processes":[`)), body: chunk(strings.Repeat(`{},`, 1000))}.start(t)
	c, read := countingClient(t, url)
	c.MaxAnswerBytes = 64 << 10
	err := within(t, 5*time.Second, func(ctx context.Context) error { _, err := c.List(ctx); return err })
	wantLimit(t, err, "endless process list")
	if n := read.Load(); n > c.MaxAnswerBytes+slack {
		t.Fatalf("read %d bytes from the connection under a limit of %d", n, c.MaxAnswerBytes)
	}
}

func TestHugeJSONAnswerIsRefused(t *testing.T) {
	entry := strings.Repeat(`{"id":"x"},`, 1000)
	const total = 100 << 20
	n := total / len(entry)
	// Announced: refused from its Content-Length, before a byte of the body is read.
	length := len(`{"processes":[`) + n*len(entry) + len(`{}]}`)
	announced := hostile{head: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n{\"processes\":[", length),
		body: []byte(entry), times: n}.start(t)
	c, read := countingClient(t, announced)
	err := within(t, 5*time.Second, func(ctx context.Context) error { _, err := c.List(ctx); return err })
	wantLimit(t, err, "100 MiB announced")
	if got := read.Load(); got > slack {
		t.Fatalf("read %d bytes of an answer announced at %d", got, length)
	}
	// Chunked: read up to the default limit, with memory to match.
	unannounced := hostile{head: chunked + string(chunk(`{"processes":[`)), body: chunk(entry), times: n}.start(t)
	c, read = countingClient(t, unannounced)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = within(t, 10*time.Second, func(ctx context.Context) error { _, err := c.List(ctx); return err })
	runtime.ReadMemStats(&after)
	wantLimit(t, err, "100 MiB chunked")
	if got := read.Load(); got > shim.DefaultMaxAnswerBytes+slack {
		t.Fatalf("read %d bytes under a limit of %d", got, shim.DefaultMaxAnswerBytes)
	}
	// The answer's buffer doubles up to the limit (8 MiB allocated in all); the rest is the
	// transport's and the listener's own. Decoding the whole answer would take over 100 MiB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*shim.DefaultMaxAnswerBytes {
		t.Fatalf("allocated %d bytes for an answer cut at %d", alloc, shim.DefaultMaxAnswerBytes)
	}
}

func TestHugeErrorBodyIsCut(t *testing.T) {
	head := "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n"
	url := hostile{head: head, body: chunk(strings.Repeat("x", 4096))}.start(t)
	c, read := countingClient(t, url)
	err := within(t, 5*time.Second, func(ctx context.Context) error { _, err := c.Info(ctx); return err })
	var api *shim.APIError
	if !errors.As(err, &api) || api.Status != 500 || !api.Truncated || !errors.Is(err, shim.ErrAnswerTooLarge) {
		t.Fatalf("err = %v, want a truncated 500", err)
	}
	if len(api.Message) > 1024 {
		t.Fatalf("a message of %d bytes", len(api.Message))
	}
	if got := read.Load(); got > shim.MaxErrorBodyBytes+slack {
		t.Fatalf("read %d bytes of an error body under a limit of %d", got, shim.MaxErrorBodyBytes)
	}
}

func TestEndlessBodiesAreNotDrained(t *testing.T) {
	url := hostile{head: chunked, body: chunk(strings.Repeat(" ", 4096))}.start(t)
	c, read := countingClient(t, url)
	// Delete wants no body and Healthz only the status: neither reads more than MaxDrainBytes.
	if err := within(t, 5*time.Second, func(ctx context.Context) error { return c.Delete(ctx, "p", false) }); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := within(t, 5*time.Second, c.Healthz); err != nil {
		t.Fatalf("healthz: %v", err)
	}
	if got := read.Load(); got > 2*(shim.MaxDrainBytes+slack) {
		t.Fatalf("read %d bytes draining two answers", got)
	}
	// Metrics are bounded like a JSON answer.
	c.MaxAnswerBytes = 32 << 10
	err := within(t, 5*time.Second, func(ctx context.Context) error { _, err := c.Metrics(ctx); return err })
	wantLimit(t, err, "endless metrics")
}

func TestHugeHeadIsRefused(t *testing.T) {
	head := "HTTP/1.1 200 OK\r\nX-Junk: " + strings.Repeat("j", 1<<20) + "\r\nContent-Length: 2\r\n\r\n{}"
	url := hostile{head: head, times: 1}.start(t)
	c, read := countingClient(t, url)
	err := within(t, 5*time.Second, func(ctx context.Context) error { _, err := c.Info(ctx); return err })
	wantLimit(t, err, "1 MiB head")
	if got := read.Load(); got > shim.MaxHeaderBytes+slack {
		t.Fatalf("read %d bytes of a head under a limit of %d", got, shim.MaxHeaderBytes)
	}
}

func TestHugeFrameLengthIsRefused(t *testing.T) {
	head := "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n"
	// A frame announcing 4 GiB, then an endless payload.
	url := hostile{head: head + "\x01\x00\x00\x00\xff\xff\xff\xff", body: []byte(strings.Repeat("y", 4096))}.start(t)
	c, read := countingClient(t, url)
	err := within(t, 5*time.Second, func(ctx context.Context) error {
		s, err := c.Output(ctx, "p", 0, true)
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Next()
		return err
	})
	var fe *shim.FrameError
	if !errors.As(err, &fe) || !errors.Is(err, shim.ErrAnswerTooLarge) || fe.Length != 0xffffffff {
		t.Fatalf("err = %v, want a FrameError over the maximum", err)
	}
	if got := read.Load(); got > shim.MaxFramePayload+slack {
		t.Fatalf("read %d bytes of a frame stream", got)
	}
}

func TestSlowAnswersEndWithTheContext(t *testing.T) {
	cases := map[string]hostile{
		// The head never ends, a byte at a time.
		"head": {head: "HTTP/1.1 200 OK\r\n", body: []byte("X"), pause: 50 * time.Millisecond},
		// The body never ends, a byte at a time.
		"body": {head: chunked, body: chunk(" "), pause: 50 * time.Millisecond},
	}
	for name, h := range cases {
		c, _ := countingClient(t, h.start(t))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		_, err := c.Info(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Fatalf("%s: err = %v after %v, want the context's deadline at 300ms", name, err, time.Since(start))
		}
	}
}

func TestDribbledAnswersStall(t *testing.T) {
	// Heads at once, then a byte every 20 ms that never ends the answer: without a deadline on the
	// context, each call still ends after AnswerTimeout.
	dribble := map[string]hostile{
		"json":  {head: chunked, body: chunk(" "), pause: 20 * time.Millisecond},
		"error": {head: "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n", body: chunk("x"), pause: 20 * time.Millisecond},
		"drain": {head: chunked, body: chunk(" "), pause: 20 * time.Millisecond},
	}
	for name, h := range dribble {
		c, _ := countingClient(t, h.start(t))
		c.AnswerTimeout = 300 * time.Millisecond
		start := time.Now()
		var err error
		switch name {
		case "json":
			_, err = c.Info(context.Background())
			if !errors.Is(err, shim.ErrAnswerStalled) {
				t.Fatalf("%s: err = %v, want a *StallError", name, err)
			}
		case "error":
			_, err = c.Info(context.Background())
			var api *shim.APIError
			if !errors.As(err, &api) || api.Status != 503 {
				t.Fatalf("%s: err = %v, want the 503", name, err)
			}
		case "drain":
			if err = c.Delete(context.Background(), "p", false); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("%s: took %v under an answer timeout of 300ms", name, took)
		}
		t.Logf("%s: %v after %v", name, err, time.Since(start))
	}
}
