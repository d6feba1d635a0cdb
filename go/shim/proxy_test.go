// Tests of NewViaProxy against the real shim behind a local reverse proxy that behaves like the
// apiserver's pods/proxy: it answers only under a pod's proxy path, demands its own credentials in
// Authorization, and strips Authorization before forwarding. Everything a client does (spawn, a tty
// with resize and stdin, output followed to the exit, files in and out) must work through it, and a
// token in Authorization must not.

package shim_test

import (
	"archive/tar"
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

const podProxyPath = "/api/v1/namespaces/steps/pods/step-1:7777/proxy"

// apiProxy is the stand-in for the apiserver's routing only; the shim behind it is the real binary.
type apiProxy struct {
	srv *httptest.Server
	// seen counts requests that carried the proxy's credentials, refused the ones without.
	seen, refused atomic.Int64
}

func startAPIProxy(t *testing.T, shimURL string) *apiProxy {
	t.Helper()
	target, err := url.Parse(shimURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.URL.Path = strings.TrimPrefix(r.In.URL.Path, podProxyPath)
			r.Out.URL.RawPath = ""
			// What the apiserver does: the caller's Kubernetes credentials are not the shim's.
			r.Out.Header.Del("Authorization")
		},
		FlushInterval: -1,
	}
	if target.Scheme == "https" {
		// What the apiserver does for pods/https:NAME:PORT/proxy: TLS to the pod, no pin checked.
		rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer kube-credentials" {
			p.refused.Add(1)
			http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
			return
		}
		if !strings.HasPrefix(r.URL.Path, podProxyPath+"/") {
			http.NotFound(w, r)
			return
		}
		p.seen.Add(1)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// kubeCreds adds the proxy's credentials, as client-go's rest transport adds a bearer token.
type kubeCreds struct{ next http.RoundTripper }

func (k kubeCreds) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer kube-credentials")
	return k.next.RoundTrip(r)
}

func TestViaProxyEverythingWorks(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	px := startAPIProxy(t, s.URL)
	c, err := shim.NewViaProxy(px.srv.URL+podProxyPath, kubeCreds{http.DefaultTransport}, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Healthz(ctx); err != nil {
		t.Fatalf("healthz through the proxy: %v", err)
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("info through the proxy: %v", err)
	}

	// A tty process: resize and stdin go through as POSTs, output streams back to the exit.
	if _, err := c.Run(ctx, "tty", shim.Spec{Path: "sh", Args: []string{"-c",
		"stty size; read x; echo got-$x; stty size; exit 3"}, Stdin: true, TTY: &shim.TTYSize{Cols: 80, Rows: 24}}); err != nil {
		t.Fatal(err)
	}
	var out shimtest.Buffer
	followed := make(chan *shim.Exit, 1)
	go func() {
		exit, err := c.Follow(ctx, "tty", 0, func(f shim.Frame) error {
			if f.Type == shim.FrameStdout {
				_, _ = out.Write(f.Payload)
			}
			return nil
		})
		if err != nil {
			t.Errorf("follow through the proxy: %v", err)
		}
		followed <- exit
	}()
	shimtest.Eventually(t, 20*time.Second, "the first stty size", func() bool { return strings.Contains(out.String(), "24 80") })
	if _, err := c.Resize(ctx, "tty", shim.TTYSize{Cols: 100, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteStdin(ctx, "tty", 0, []byte("typed\n"), true); err != nil {
		t.Fatal(err)
	}
	if exit := <-followed; exit == nil || exit.Status != 3 {
		t.Fatalf("exit %+v; output %q", exit, out.String())
	}
	if !regexp.MustCompile(`(?s)24 80.*got-typed.*30 100`).MatchString(out.String()) {
		t.Fatalf("stdin or the resize did not get through: %q", out.String())
	}

	// Re-attach from offset 0 replays the same output: resume works through the proxy.
	var again bytes.Buffer
	exit, err := c.Follow(ctx, "tty", 0, func(f shim.Frame) error {
		if f.Type == shim.FrameStdout {
			again.Write(f.Payload)
		}
		return nil
	})
	if err != nil || exit.Status != 3 || again.String() != out.String() {
		t.Fatalf("re-follow: exit %+v err %v, %q vs %q", exit, err, again.String(), out.String())
	}

	// Files in and out: a tar up and the same bytes back.
	dir := t.TempDir() + "/up"
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	body := bytes.Repeat([]byte("proxied "), 64<<10)
	_ = tw.WriteHeader(&tar.Header{Name: "big.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
	_, _ = tw.Write(body)
	_ = tw.Close()
	if err := c.PutFiles(ctx, dir, io.MultiReader(&in)); err != nil {
		t.Fatalf("files in through the proxy: %v", err)
	}
	var back bytes.Buffer
	if err := c.GetFiles(ctx, dir+"/big.bin", &back); err != nil {
		t.Fatalf("files out through the proxy: %v", err)
	}
	tr := tar.NewReader(&back)
	h, err := tr.Next()
	if err != nil || h.Name != "big.bin" || h.Size != int64(len(body)) {
		t.Fatalf("files out: %+v %v", h, err)
	}
	if got, err := io.ReadAll(tr); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("files out: %d bytes back, not the %d sent (%v)", len(got), len(body), err)
	}
	if px.seen.Load() < 8 || px.refused.Load() != 0 {
		t.Fatalf("the proxy saw %d requests and refused %d: not everything went through it",
			px.seen.Load(), px.refused.Load())
	}

	// A token in Authorization is stripped by the proxy: the shim refuses, as behind the apiserver.
	bearer, err := shim.New(px.srv.URL+podProxyPath, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	bearer.HTTP.Transport = kubeCreds{http.DefaultTransport}
	if _, err := bearer.Info(ctx); !shim.IsUnauthorized(err) {
		t.Fatalf("a bearer token through the proxy: %v, want 401 from the shim", err)
	}
	// Without the proxy's credentials the proxy itself refuses.
	plain, _ := shim.NewViaProxy(px.srv.URL+podProxyPath, http.DefaultTransport, s.Token)
	if _, err := plain.Info(ctx); !shim.IsUnauthorized(err) || px.refused.Load() == 0 {
		t.Fatalf("no proxy credentials: %v", err)
	}
}
