// Test harness: starts the real stepshim binary built by cargo on 127.0.0.1:0, a TCP proxy that cuts
// connections mid-response, and small helpers for polling with deadlines.

package shim_test

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	shim "stepshim.dev/protocol/go"
)

type testShim struct {
	URL    string
	Token  string
	Client *shim.Client
}

var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// shimBinary finds the stepshim binary: $STEPSHIM_BIN, else the cargo debug build of this repository.
func shimBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STEPSHIM_BIN")
	if bin == "" {
		abs, err := filepath.Abs(filepath.Join("..", "..", "target", "debug", "stepshim"))
		if err != nil {
			t.Fatal(err)
		}
		bin = abs
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("stepshim binary not found at %s (%v): run `cargo build -p stepshim` in the repository root, "+
			"or set STEPSHIM_BIN to the binary", bin, err)
	}
	return bin
}

// startShim runs the shim with a random token until the end of the test.
func startShim(t *testing.T) *testShim {
	t.Helper()
	bin := shimBinary(t)
	var raw [32]byte
	_, _ = crand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(token))

	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPSHIM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// The shim writes its address to the ready file once it serves (PROTOCOL.md section 7).
	readyFile := filepath.Join(t.TempDir(), "ready")
	cmd.Env = append(cmd.Env,
		"STEPSHIM_READY_FILE="+readyFile,
		"STEPSHIM_LISTEN=127.0.0.1:0",
		"STEPSHIM_TOKEN_SHA256="+hex.EncodeToString(sum[:]),
		"STEPSHIM_LOG=info",
		"STEPSHIM_DATA_DIR="+t.TempDir(),
		"STEPSHIM_GRACE_SECONDS=1",
		"NO_COLOR=1",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	// Drain stderr for the whole run (a full pipe would block the shim), remembering it for failures.
	var logMu sync.Mutex
	var logBuf bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := ansiEscape.ReplaceAllString(sc.Text(), "")
			logMu.Lock()
			logBuf.WriteString(line + "\n")
			logMu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			logMu.Lock()
			t.Logf("shim log:\n%s", logBuf.String())
			logMu.Unlock()
		}
	})

	var addr string
	deadline := time.Now().Add(15 * time.Second)
	for addr == "" {
		if b, err := os.ReadFile(readyFile); err == nil {
			addr = strings.TrimSpace(string(b))
			break
		}
		select {
		case <-exited:
			logMu.Lock()
			defer logMu.Unlock()
			t.Fatalf("stepshim exited before it was ready:\n%s", logBuf.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("stepshim wrote no ready file within 15s")
		}
	}
	url := "http://" + addr
	c, err := shim.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	return &testShim{URL: url, Token: token, Client: c}
}

// ctx is a context for one test, bounded so that a hang fails instead of stalling CI.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 10ms until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer that a stream may write while the test polls it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cutProxy forwards TCP connections to a target and cuts each one after a random number of bytes of
// the target's answers, usually in the middle of a frame or a header: within the first bound bytes,
// for a bound picked at random from bounds. Following output needs a bound over 1 MiB + headers, so
// that a connection can carry a frame of the largest size whole; otherwise a resume at such a frame
// could never make progress.
type cutProxy struct {
	ln     net.Listener
	target string
	bounds []int
	cuts   atomic.Int64
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string, bounds ...int) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, bounds: bounds, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *cutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *cutProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(client)
	}
}

func (p *cutProxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.track(client, true)
	p.track(server, true)
	defer func() {
		_ = client.Close()
		_ = server.Close()
		p.track(client, false)
		p.track(server, false)
	}()
	go func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
	}()
	limit := int64(1 + rand.N(p.bounds[rand.N(len(p.bounds))]))
	n, _ := io.Copy(client, io.LimitReader(server, limit))
	if n == limit {
		p.cuts.Add(1)
	}
}
