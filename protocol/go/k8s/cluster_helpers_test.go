//go:build cluster

// Helpers of cluster_test.go: the environment the wrapper passes, a connection counting the worker's
// pod requests, the state carried across the restart, and process and tar helpers.

package k8s

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	shim "stepshim.dev/protocol/go"
)

// kitEnv is what the wrapper passes: the worker's kubeconfig, namespace and key file, the images, the
// shim ConfigMap and the file carrying state from TestKitStart to TestKitResume.
type kitEnv struct {
	kubeconfig, namespace, keyFile, stepImage, shimImage, configMap, state string
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
		state: get("STEPSHIM_KIT_STATE"),
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

// run runs a process through the shim and returns its stdout, stderr and exit status.
func run(t *testing.T, ctx context.Context, c *shim.Client, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	p, err := shim.NewContainer(c).Run(ctx, shim.ProcessSpec{Path: args[0], Args: args[1:]},
		shim.ProcessIO{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("run %q: %v", args, err)
	}
	status, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %q: %v", args, err)
	}
	return out.String(), errOut.String(), status
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
