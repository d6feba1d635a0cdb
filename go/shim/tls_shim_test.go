// The real shim's TLS build (PROTOCOL.md 1.1): what its handshake accepts and refuses, and pulls
// between two TLS shims naming the source's pin. The rest of the suite runs over TLS too with
// STEPSHIM_TEST_TLS=1 (tests/run does it); these tests run in both passes.

package shim_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

// tlsShimBinary finds a stepshim built with TLS: $STEPSHIM_TLS_BIN; else $STEPSHIM_BIN when the
// whole suite runs over TLS; else the first of target/debug/stepshim-tls (a debug build copied there)
// and target/image/stepshim-tls (the image's, from images/build-shim-binary --tls).
func tlsShimBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("STEPSHIM_TLS_BIN"); bin != "" {
		return bin
	}
	if testTLS() {
		return shimtest.Binary(t)
	}
	var tried []string
	for _, dir := range []string{"debug", "image"} {
		bin, err := filepath.Abs(filepath.Join(shimtest.RepoRoot(t), "target", dir, "stepshim-tls"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
		tried = append(tried, bin)
	}
	t.Fatalf("no stepshim with TLS at %s: run `cargo build -p stepshim --features tls && cp target/debug/stepshim "+
		"target/debug/stepshim-tls` (or images/build-shim-binary --tls) in the repository root, or set STEPSHIM_TLS_BIN",
		strings.Join(tried, " or "))
	return ""
}

func startTLSShim(t *testing.T) *testShim {
	t.Helper()
	return launchShim(t, tlsShimBinary(t), true)
}

func TestRealTLSShimHandshakes(t *testing.T) {
	s := startTLSShim(t)
	ctx := shimtest.Context(t)
	if _, err := s.Client.CheckProtocol(ctx); err != nil {
		t.Fatalf("the pinned client: %v", err)
	}
	if err := s.Client.Healthz(ctx); err != nil {
		t.Fatalf("healthz over TLS: %v", err)
	}
	other, err := shim.NewTLS(s.URL, s.Token, shim.TLSPinOfToken("another pod's token"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Info(ctx); !errors.Is(err, shim.ErrPinMismatch) {
		t.Fatalf("another pin: want ErrPinMismatch, got %v", err)
	}

	// Clear text: the shim closes the connection without an HTTP answer.
	conn, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if strings.HasPrefix(line, "HTTP/") {
		t.Fatalf("clear text got an HTTP answer: %q", line)
	}
	// It closes the connection: a shim that hung would leave the read to its deadline.
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		t.Fatalf("clear text: the shim neither answered nor closed the connection in 10 s")
	}

	dial := func(cfg *tls.Config) (tls.ConnectionState, error) {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
		c, err := d.DialContext(ctx, "tcp", s.Addr)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		// Read a little, so that tickets the shim might send after the handshake are taken in.
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = c.Read(make([]byte, 1))
		return c.(*tls.Conn).ConnectionState(), nil
	}
	if _, err := dial(&tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("the shim accepted TLS 1.2")
	}
	// A client that would resume if it could: every connection must still be a full handshake.
	cache := tls.NewLRUClientSessionCache(4)
	offer := &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache, NextProtos: []string{"h2", "http/1.1"}}
	for i := 0; i < 3; i++ {
		cs, err := dial(offer)
		if err != nil {
			t.Fatalf("handshake %d: %v", i, err)
		}
		if cs.DidResume || cs.Version != tls.VersionTLS13 || cs.NegotiatedProtocol != "http/1.1" {
			t.Fatalf("handshake %d: resumed %v, version %#x, ALPN %q; want a full TLS 1.3 handshake and http/1.1",
				i, cs.DidResume, cs.Version, cs.NegotiatedProtocol)
		}
	}
}

func TestRealTLSPullNamesTheSourcePin(t *testing.T) {
	a, b := startTLSShim(t), startTLSShim(t)
	ctx := shimtest.Context(t)
	srcRoot, dstRoot := t.TempDir(), t.TempDir()
	writeTree(t, srcRoot)
	token, g, err := a.Client.Grant(ctx, srcRoot, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	pull := func(id string, spec shim.PullSpec) (*shim.PullStatus, error) {
		t.Helper()
		spec.Path, spec.Token, spec.Target = srcRoot+"/", token, filepath.Join(dstRoot, id) // its contents
		retries := uint32(1)
		spec.ConnectRetries = &retries
		if _, _, err := b.Client.Pull(ctx, id, spec, 30*time.Second); err != nil {
			return nil, err
		}
		return b.Client.WaitPull(ctx, id)
	}
	p, err := pull("right", shim.PullSpec{Source: a.URL, SourcePin: a.Pin})
	if err != nil {
		t.Fatalf("a pull with the source's pin: %v", err)
	}
	sameTree(t, srcRoot, filepath.Join(dstRoot, "right"))
	if p.Source != a.URL {
		t.Errorf("the pull reports source %q, want %q", p.Source, a.URL)
	}
	used := func() uint64 {
		grants, err := a.Client.Grants(ctx)
		if err != nil || len(grants) != 1 || grants[0].ID != g.ID {
			t.Fatalf("grants: %+v, %v", grants, err)
		}
		return grants[0].Used
	}
	before := used()

	p, err = pull("wrong", shim.PullSpec{Source: a.URL, SourcePin: b.Pin})
	if err == nil || p.State != shim.PullFailed || !strings.Contains(p.Error, "pinned key") {
		t.Fatalf("a pull naming another shim's pin: %+v, %v; want failed on the key", p, err)
	}
	if _, err := os.Stat(filepath.Join(dstRoot, "wrong")); !os.IsNotExist(err) {
		t.Fatalf("the refused pull left its target: %v", err)
	}
	for name, spec := range map[string]shim.PullSpec{
		"an https source without a pin": {Source: a.URL},
		"a pin with an http source":     {Source: "http://" + a.Addr, SourcePin: a.Pin},
		"a pin that is not 64 hex":      {Source: a.URL, SourcePin: "abc"},
	} {
		if _, err := pull("bad", spec); !shim.HasCode(err, shim.CodeBadRequest) {
			t.Errorf("%s: want 400 bad_request, got %v", name, err)
		}
	}
	// The pull naming the wrong pin stopped at the handshake: it never spent the grant.
	if after := used(); before == 0 || after != before {
		t.Fatalf("grant uses: %d after the right pull, %d after the others", before, after)
	}
}
