// The TLS client (PROTOCOL.md 1.1) against Go TLS servers: the shared vectors of protocol/testdata/
// tls.json, a server holding the key of a pod's seed (accepted), and the servers a pin must refuse:
// another key, a certificate an authority signed, TLS 1.2, plain HTTP. The same client against the
// real shim's TLS build is in tls_shim_test.go.

package shim_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

func TestTLSVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "protocol", "testdata", "tls.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		About   string `json:"about"`
		Vectors []struct {
			Token, Seed, Pin string
		} `json:"vectors"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.About, `"stepshim tls seed v1"`) || len(v.Vectors) < 2 {
		t.Fatalf("tls.json: about %q, %d vectors", v.About, len(v.Vectors))
	}
	for _, c := range v.Vectors {
		seed := shim.TLSSeed(c.Token)
		if got := hex.EncodeToString(seed[:]); got != c.Seed {
			t.Errorf("seed of %s: got %s, want %s", c.Token, got, c.Seed)
		}
		if got := shim.TLSPin(seed); got != c.Pin {
			t.Errorf("pin of %s: got %s, want %s", c.Token, got, c.Pin)
		}
		if got := shim.TLSPinOfToken(c.Token); got != c.Pin {
			t.Errorf("TLSPinOfToken(%s): got %s, want %s", c.Token, got, c.Pin)
		}
	}
}

// selfSigned is a carrier certificate of key: self-signed, no names, as the shim's.
func selfSigned(t *testing.T, key crypto.Signer) tls.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stepshim"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// caSigned is a certificate for 127.0.0.1 of a fresh ECDSA key signed by a fresh authority, and that
// authority's pool: what a client trusting authorities would accept.
func caSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(crand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}, pool
}

// tlsServer serves /healthz and an /v1/info that wants token, with cert, at most maxVersion, and
// counts full handshakes and resumed ones.
type tlsServer struct {
	srv             *httptest.Server
	full, resumed   atomic.Int64
	infos, refusals atomic.Int64
}

func startTLSServer(t *testing.T, cert tls.Certificate, maxVersion uint16, token string) *tlsServer {
	t.Helper()
	s := &tlsServer{}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			_, _ = w.Write([]byte(`{"ok":true}`))
		case r.Header.Get("Authorization") != "Bearer "+token:
			s.refusals.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"bad token"}}`))
		default:
			s.infos.Add(1)
			_, _ = w.Write([]byte(`{"protocol":1,"version":"test","boot_id":"b"}`))
		}
	}))
	s.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert},
		MaxVersion:   maxVersion,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.DidResume {
				s.resumed.Add(1)
			} else {
				s.full.Add(1)
			}
			return nil
		},
	}
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *tlsServer) URL() string { return s.srv.URL }

const testToken = "c3a1f08e5b2d94e7016fa8d3b5c9e2f4a7d1086b3e5f9c2a4d7e0b1f6a3c8d5e"

func TestTLSPinnedKeyIsAccepted(t *testing.T) {
	ctx := shimtest.Context(t)
	s := startTLSServer(t, selfSigned(t, shim.TLSKey(shim.TLSSeed(testToken))), tls.VersionTLS13, testToken)
	c, err := shim.NewTLS(s.URL(), testToken, shim.TLSPinOfToken(testToken))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pin() != shim.TLSPinOfToken(testToken) || !strings.HasPrefix(c.BaseURL(), "https://") {
		t.Fatalf("client: pin %q, base %q", c.Pin(), c.BaseURL())
	}
	for i := 0; i < 3; i++ {
		if err := c.Healthz(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil || info.Version != "test" {
			t.Fatalf("info over TLS: %+v, %v", info, err)
		}
		// A new connection each time: each must be a full handshake, never a resumption.
		c.HTTP.Transport.(*http.Transport).CloseIdleConnections()
	}
	if s.full.Load() != 3 || s.resumed.Load() != 0 {
		t.Fatalf("handshakes: %d full, %d resumed; want 3 full and none resumed", s.full.Load(), s.resumed.Load())
	}
	if _, err := c.WithGrantToken("not-the-token").Info(ctx); !shim.IsUnauthorized(err) {
		t.Fatalf("another token over the same pin: want 401, got %v", err)
	}
}

// refused asserts that a call through c fails in the handshake, before any request reaches s, and
// at once: the retrying loops take a pin mismatch as final.
func refused(t *testing.T, s *tlsServer, c *shim.Client, wantPin bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.Info(ctx)
	if err == nil {
		t.Fatal("the handshake was accepted")
	}
	if errors.Is(err, shim.ErrPinMismatch) != wantPin {
		t.Fatalf("errors.Is(err, ErrPinMismatch) = %v, want %v: %v", !wantPin, wantPin, err)
	}
	if wantPin {
		start := time.Now()
		if _, rerr := c.Run(ctx, "p", shim.Spec{Path: "true"}); !errors.Is(rerr, shim.ErrPinMismatch) || time.Since(start) > 5*time.Second {
			t.Fatalf("Run against the wrong key: %v after %v; want ErrPinMismatch at once", rerr, time.Since(start))
		}
	}
	if n := s.infos.Load() + s.refusals.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	return err
}

func TestTLSOtherKeysAreRefused(t *testing.T) {
	pin := shim.TLSPinOfToken(testToken)
	other := shim.TLSKey(shim.TLSSeed(strings.Repeat("0", 64)))
	_, randomKey, _ := ed25519.GenerateKey(crand.Reader)
	caCert, pool := caSigned(t)
	cases := map[string]tls.Certificate{
		"another pod's key":                 selfSigned(t, other),
		"a random Ed25519 key":              selfSigned(t, randomKey),
		"a certificate an authority signed": caCert,
	}
	for name, cert := range cases {
		t.Run(name, func(t *testing.T) {
			s := startTLSServer(t, cert, tls.VersionTLS13, testToken)
			c, err := shim.NewTLS(s.URL(), testToken, pin)
			if err != nil {
				t.Fatal(err)
			}
			err = refused(t, s, c, true)
			t.Logf("refused: %v", err)
		})
	}
	// The authority's certificate is a good one by the usual rules: the refusal is the pin's doing.
	s := startTLSServer(t, caCert, tls.VersionTLS13, testToken)
	usual := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := usual.Get(s.URL() + "/healthz")
	if err != nil {
		t.Fatalf("a client trusting the authority: %v", err)
	}
	resp.Body.Close()
}

func TestTLS12AndPlainHTTPAreRefused(t *testing.T) {
	pin := shim.TLSPinOfToken(testToken)
	s := startTLSServer(t, selfSigned(t, shim.TLSKey(shim.TLSSeed(testToken))), tls.VersionTLS12, testToken)
	c, err := shim.NewTLS(s.URL(), testToken, pin)
	if err != nil {
		t.Fatal(err)
	}
	err = refused(t, s, c, false)
	if !strings.Contains(err.Error(), "version") {
		t.Fatalf("TLS 1.2 server: want a protocol version error, got %v", err)
	}
	if s.full.Load() != 0 {
		t.Fatalf("a TLS 1.2 handshake completed")
	}

	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the plain server: %s", r.URL)
	}))
	t.Cleanup(plain.Close)
	c, err = shim.NewTLS("https://"+strings.TrimPrefix(plain.URL, "http://"), testToken, pin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(shimtest.Context(t)); err == nil {
		t.Fatal("a plain HTTP server answered a TLS client")
	}
}

func TestTLSArgumentsAreChecked(t *testing.T) {
	pin := shim.TLSPinOfToken(testToken)
	for _, bad := range []string{"", "zz", pin[:62], pin + "00", strings.Repeat("g", 64)} {
		if _, err := shim.NewTLS("https://127.0.0.1:7777", testToken, bad); err == nil || !strings.Contains(err.Error(), "pin") {
			t.Errorf("pin %q: want an error naming the pin, got %v", bad, err)
		}
	}
	if _, err := shim.NewTLS("http://127.0.0.1:7777", testToken, pin); err == nil {
		t.Error("NewTLS took an http URL")
	}
	if _, err := shim.New("https://127.0.0.1:7777", testToken); err == nil || !strings.Contains(err.Error(), "NewTLS") {
		t.Errorf("New with an https URL: want an error pointing at NewTLS, got %v", err)
	}
	cfg, err := shim.PinnedTLSConfig(strings.ToUpper(pin))
	if err != nil || cfg.MinVersion != tls.VersionTLS13 || !cfg.SessionTicketsDisabled || cfg.ClientSessionCache != nil {
		t.Fatalf("PinnedTLSConfig: %+v, %v", cfg, err)
	}
	b, _ := json.Marshal(shim.PullSpec{Source: "http://10.0.0.1:7777"})
	if strings.Contains(string(b), "source_pin") {
		t.Errorf("a plain pull spec carries source_pin: %s", b)
	}
	b, _ = json.Marshal(shim.PullSpec{Source: "https://10.0.0.1:7777", SourcePin: pin})
	if !strings.Contains(string(b), `"source_pin":"`+pin+`"`) {
		t.Errorf("a TLS pull spec: %s", b)
	}
}
