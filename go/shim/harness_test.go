// Test harness: the real stepshim binary built by cargo on 127.0.0.1:0 (package shimtest runs it),
// clients of it, and a TCP proxy that cuts connections mid-response. With STEPSHIM_TEST_TLS=1
// every shim serves TLS (PROTOCOL.md 1.1) with the seed of its token and every client pins it, so
// the whole suite runs over TLS against a build with TLS (tests/run does both).

package shim_test

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

type testShim struct {
	// URL is http://Addr, or https://Addr for a shim serving TLS.
	URL   string
	Addr  string
	Token string
	// Pin is the shim's TLS pin, empty for a plain shim.
	Pin    string
	Client *shim.Client
}

// clientAt is a client for this shim reached at addr (the shim's or a proxy's) presenting token: over
// TLS with the shim's pin when it serves TLS.
func (s *testShim) clientAt(t *testing.T, addr, token string) *shim.Client {
	t.Helper()
	var c *shim.Client
	var err error
	if s.Pin != "" {
		c, err = shim.NewTLS("https://"+addr, token, s.Pin)
	} else {
		c, err = shim.New("http://"+addr, token)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// httpClient is a bare HTTP client for this shim, pinning it when it serves TLS.
func (s *testShim) httpClient(t *testing.T) *http.Client {
	t.Helper()
	if s.Pin == "" {
		return http.DefaultClient
	}
	cfg, err := shim.PinnedTLSConfig(s.Pin)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

// testTLS says whether startShim serves TLS: STEPSHIM_TEST_TLS=1.
func testTLS() bool { return os.Getenv("STEPSHIM_TEST_TLS") == "1" }

// startShim runs the shim with a random token until the end of the test, serving TLS when
// STEPSHIM_TEST_TLS=1.
func startShim(t *testing.T) *testShim {
	t.Helper()
	return launchShim(t, shimtest.Binary(t), testTLS())
}

// launchShim runs bin with a random token until the end of the test; with tls, it serves TLS with the
// token's seed (PROTOCOL.md 1.1) and the client pins it.
func launchShim(t *testing.T, bin string, tls bool) *testShim {
	t.Helper()
	var raw [32]byte
	_, _ = crand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	opt := shimtest.Options{Bin: bin}
	if tls {
		seed := shim.TLSSeed(token)
		opt.TLSSeed = hex.EncodeToString(seed[:])
	}
	p, err := shimtest.Start(t, token, opt)
	if err != nil {
		t.Fatal(err)
	}
	s := &testShim{URL: "http://" + p.Addr, Addr: p.Addr, Token: token}
	if tls {
		s.URL, s.Pin = "https://"+p.Addr, shim.TLSPinOfToken(token)
	}
	s.Client = s.clientAt(t, p.Addr, token)
	return s
}

// cutProxy forwards TCP connections to a target and cuts each one after a random number of bytes of
// the target's answers, usually in the middle of a frame or a header: within the first bound bytes,
// for a bound picked at random from bounds. Following output needs a bound over 1 MiB + headers, so
// that a connection can carry a frame of the largest size whole; otherwise a resume at such a frame
// could never make progress. For a TLS shim the bytes of its handshake come first, so the bounds count
// from the end of the handshake (and count the records' overhead with the answer).
type cutProxy struct {
	ln     net.Listener
	target string
	bounds []int
	// skip is the size of the shim's side of a handshake, not counted against the bound.
	skip  int64
	cuts  atomic.Int64
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startProxy(t *testing.T, s *testShim, bounds ...int) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: s.Addr, bounds: bounds, conns: map[net.Conn]struct{}{}}
	if s.Pin != "" {
		p.skip = handshakeBytes(t, s)
	}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// handshakeBytes is how many bytes the TLS shim s sends in a handshake with its pinned client.
func handshakeBytes(t *testing.T, s *testShim) int64 {
	t.Helper()
	raw, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cfg, err := shim.PinnedTLSConfig(s.Pin)
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	if err := tls.Client(&countingConn{Conn: raw, read: &read}, cfg).Handshake(); err != nil {
		t.Fatalf("a TLS handshake with the shim: %v", err)
	}
	return read.Load()
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

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
	limit := p.skip + int64(1+rand.N(p.bounds[rand.N(len(p.bounds))]))
	n, _ := io.Copy(client, io.LimitReader(server, limit))
	if n == limit {
		p.cuts.Add(1)
	}
}

// skipBefore020 skips a test of feature against a shim older than 0.2.0: the compatibility run
// points the suite at the previous release's shim.
func skipBefore020(t *testing.T, s *testShim, feature string) {
	t.Helper()
	info, err := s.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(info.Version, "0.1.") {
		t.Skipf("the shim is %s: %s came with 0.2.0", info.Version, feature)
	}
}
