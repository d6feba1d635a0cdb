//go:build cluster

// Helpers of cluster_test.go: the environment the wrapper passes, a connection counting the worker's
// pod requests, the state carried across the restart, process and tar helpers, and the TLS and P2P
// checks.

package k8s

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

// kitEnv is what the wrapper passes: the worker's kubeconfig, namespace and key file, the images, the
// shim ConfigMap and the file carrying state from TestKitStart to TestKitResume.
type kitEnv struct {
	kubeconfig, namespace, keyFile, stepImage, shimImage, configMap, state string
	// tls is STEPSHIM_KIT_TLS: empty or "on" (the default: the image's TLS build), "off" for a shim
	// image without /stepshim-tls.
	tls TLSMode
}

// image is the init-container delivery of the shim image, with TLS as the environment says.
func (e kitEnv) image(t *testing.T) Delivery {
	d, err := InitContainer(e.shimImage).WithTLS(e.tls)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func readEnv(t *testing.T) kitEnv {
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	e := kitEnv{
		kubeconfig: get("STEPSHIM_KIT_KUBECONFIG"), namespace: get("STEPSHIM_KIT_NAMESPACE"),
		keyFile: get("STEPSHIM_KIT_KEY"), stepImage: get("STEPSHIM_KIT_STEP_IMAGE"),
		shimImage: get("STEPSHIM_KIT_SHIM_IMAGE"), configMap: get("STEPSHIM_KIT_CONFIGMAP"),
		state: get("STEPSHIM_KIT_STATE"), tls: TLSMode(os.Getenv("STEPSHIM_KIT_TLS")),
	}
	if len(missing) > 0 {
		t.Fatalf("the cluster test needs %s (tests/cluster/tests.d/30-go-kit sets them)", strings.Join(missing, ", "))
	}
	return e
}

// requests counts the worker's pod LIST and WATCH requests: the informer should make its one watch
// (client-go 1.35 streams the initial list over it) and nothing after, whatever the worker is asked.
type requests struct {
	path           string
	next           http.RoundTripper
	lists, watches atomic.Int64
}

func (c *requests) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Path == c.path {
		if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
			c.watches.Add(1)
		} else {
			c.lists.Add(1)
		}
	}
	return c.next.RoundTrip(r)
}

func (c *requests) String() string {
	return fmt.Sprintf("%d LIST and %d WATCH requests on pods", c.lists.Load(), c.watches.Load())
}

// connect is a fresh start of ATC's side: a new clientset, the key read from its file, a new Worker.
func connect(t *testing.T, ctx context.Context, e kitEnv) (*Worker, *requests, kubernetes.Interface) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: e.kubeconfig}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	counts := &requests{path: "/api/v1/namespaces/" + e.namespace + "/pods"}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counts.next = rt; return counts })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key, err := KeyFromFile(e.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(ctx, cs, Config{Namespace: e.namespace, Worker: "go-kit", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w, counts, cs
}

// state is what ATC would have stored before its restart.
type state struct {
	Pod, Process string
	Offset       int64
	Output       string
	Others       []string
}

// runs numbers the processes run, whose ids must differ within a shim.
var runs atomic.Int64

// run runs a process through the shim and returns its stdout, stderr and exit status.
func run(t *testing.T, ctx context.Context, c *shim.Client, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	id := fmt.Sprintf("run-%d", runs.Add(1))
	sp, err := c.Run(ctx, id, shim.Spec{Path: args[0], Args: args[1:], Stdin: stdin != nil})
	if err != nil {
		t.Fatalf("run %q: %v", args, err)
	}
	if stdin != nil {
		go c.FeedStdin(ctx, sp, stdin)
	}
	out, errOut, exit, err := shimtest.Output(ctx, c, id, 0)
	if err != nil {
		t.Fatalf("follow %q: %v", args, err)
	}
	return string(out), string(errOut), exit.Status
}

func tarOf(t *testing.T, files map[string][]byte) io.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		mode := int64(0o644)
		if strings.HasSuffix(n, ".sh") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: mode, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(files[n])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func untar(t *testing.T, r io.Reader) map[string]string {
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("files out: %v", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = string(b)
	}
}

// checkTLS checks what the pin of pod name's TLS shim at ip refuses: plain HTTP, and the pin of
// another pod (the worker's own client, with the right pin, already answered).
func checkTLS(t *testing.T, ctx context.Context, w *Worker, name, ip string) {
	t.Helper()
	addr := net.JoinHostPort(ip, strconv.Itoa(ShimPort))
	plain, err := shim.New("http://"+addr, w.Token(name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Info(ctx); err == nil || shim.IsUnauthorized(err) {
		t.Fatalf("plain HTTP to a TLS shim: want the connection closed, got %v", err)
	}
	other, err := shim.NewTLS("https://"+addr, w.Token(name), w.Pin("some-other-pod"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Info(ctx); !errors.Is(err, shim.ErrPinMismatch) {
		t.Fatalf("another pod's pin: want shim.ErrPinMismatch, got %v", err)
	}
	ok("TLS: the pod's pin answers; plain HTTP gets its connection closed; another pod's pin is refused")
}

// copyP2P has pod peer pull /build/out/ of src's pod (whose bin.dat holds data) with a grant on it,
// and checks the copy in peer; for a TLS source, a pull naming the wrong pin must fail.
func copyP2P(t *testing.T, ctx context.Context, w *Worker, src *shim.Client, peer string, data []byte) {
	t.Helper()
	if _, err := w.WaitReady(ctx, peer); err != nil {
		t.Fatal(err)
	}
	dst, err := w.Connect(ctx, peer)
	if err != nil {
		t.Fatal(err)
	}
	token, g, err := src.Grant(ctx, "/build/out", 10*time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.RevokeGrant(context.WithoutCancel(ctx), g.ID) }()
	spec := shim.PullSpec{Source: src.BaseURL(), SourcePin: src.Pin(), Path: "/build/out/", Token: token,
		Target: "/tmp/p2p/copy"}
	if _, _, err := dst.Pull(ctx, "p2p", spec, 60*time.Second); err != nil {
		t.Fatalf("P2P copy to %s: %v", peer, err)
	}
	if p, err := dst.WaitPull(ctx, "p2p"); err != nil || p.State != shim.PullDone {
		t.Fatalf("P2P copy to %s: %+v %v", peer, p, err)
	}
	sum := sha256.Sum256(data)
	got, _, status := run(t, ctx, dst, nil, "sha256sum", "/tmp/p2p/copy/bin.dat")
	if status != 0 || !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
		t.Fatalf("P2P copy in %s: %q, status %d", peer, got, status)
	}
	pulls, err := dst.Pulls(ctx)
	if err != nil || len(pulls) != 1 {
		t.Fatalf("pulls of %s: %v, %v", peer, pulls, err)
	}
	ok("P2P: %s pulled %d bytes from %s and they hash as sent", peer, pulls[0].Bytes, pulls[0].Source)
	if src.Pin() == "" {
		return
	}
	// The same grant, the pin of another pod (the peer's own).
	wrong := spec
	wrong.SourcePin, wrong.Target = w.Pin(peer), "/tmp/p2p/wrong"
	if _, _, err := dst.Pull(ctx, "wrong-pin", wrong, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	p, err := dst.WaitPull(ctx, "wrong-pin")
	if err == nil || p.State != shim.PullFailed {
		t.Fatalf("a pull naming the wrong pin: %+v, %v", p, err)
	}
	ok("P2P over TLS: a pull naming another pod's pin fails: %s", p.Error)
}
