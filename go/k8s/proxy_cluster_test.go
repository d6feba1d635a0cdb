//go:build cluster

// The kit reaching a shim only through the apiserver's pods/proxy (Worker.ShimViaProxy), as ATC would
// from outside the cluster. tests/cluster/tests.d/50-proxy runs it in a network namespace that cannot
// route to pod IPs, with a ServiceAccount holding the RBAC of `stepctl manifests --via proxy`. Each
// check prints one "50-proxy: ok:" line.

package k8s

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

func proxyOK(format string, args ...any) { fmt.Printf("50-proxy: ok: go: "+format+"\n", args...) }

func TestKitViaProxy(t *testing.T) {
	e := readEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	w, _, _ := connect(t, ctx, e)

	h, err := w.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.OK || !h.ProxyAllowed || len(h.Warnings()) > 0 {
		t.Fatalf("check: want the pod verbs, the pods/proxy verbs and no exec right: %+v", h)
	}
	proxyOK("check: pods/proxy %s allowed", strings.Join(ProxyVerbs, ", "))

	spec := StepSpec{Name: "kit-proxy", Image: e.stepImage, Delivery: e.image(t)}
	if _, err := w.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	ip, err := w.WaitReady(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	// The point of the proxy: from here the pod IP is out of reach.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(ShimPort)), time.Second); err == nil {
		c.Close()
		t.Fatalf("the pod IP %s answers from here; this test would prove nothing", ip)
	}
	c, err := w.ConnectViaProxy(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}

	out, _, status := run(t, ctx, c, strings.NewReader("through\n"), "sh", "-c", "read x; echo got-$x; exit 4")
	if out != "got-through\n" || status != 4 {
		t.Fatalf("run through the proxy: %q, status %d", out, status)
	}
	proxyOK("stdin in, output out and exit 4 through pods/proxy (pod IP %s unreachable, shim TLS %v)", ip, spec.Delivery.TLS())

	// 16 MiB up as a streamed tar, checked in the pod, and back.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	if err := c.PutFiles(ctx, "/tmp/up", io.MultiReader(tarOf(t, map[string][]byte{"big.bin": big}))); err != nil {
		t.Fatalf("files in: %v", err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(big))
	out, _, status = run(t, ctx, c, nil, "sh", "-c", "sha256sum /tmp/up/big.bin")
	if status != 0 || !strings.HasPrefix(out, sum) {
		t.Fatalf("the file in the pod: %q, status %d, want %s", out, status, sum)
	}
	var back bytes.Buffer
	if err := c.GetFiles(ctx, "/tmp/up/", &back); err != nil {
		t.Fatalf("files out: %v", err)
	}
	if got := untar(t, &back)["big.bin"]; got != string(big) {
		t.Fatalf("files out: %d bytes, want %d", len(got), len(big))
	}
	proxyOK("files: 16 MiB in (sha256 checked in the pod) and the same back through pods/proxy")

	if err := w.Delete(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	var wrong *shim.Client
	if wrong, err = w.ShimViaProxy("kit-no-such-pod"); err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.Info(ctx); !shim.IsNotFound(err) {
		t.Fatalf("a pod that does not exist: %v, want 404 from the apiserver", err)
	}
}
