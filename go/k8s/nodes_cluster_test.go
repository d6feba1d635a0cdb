//go:build cluster && multinode

// The kit across three nodes (tests/cluster/tests.multi.d/10-across-nodes): a step chain with one
// step pod on each node. A, on the first, writes an artifact and an image (rootfs/ and
// metadata.json); B, on the second, pulls the artifact from A pod to pod across nodes, with A's TLS
// pin as on one node (and the wrong pin refused); C, on the third, runs in A's image, which the
// third node's kubelet pulls through that node's forwarder from A's pod on the first; C answers
// at its pod IP and through the apiserver's proxy.

package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

func TestAcrossNodes(t *testing.T) {
	e := readEnv(t)
	nodes := strings.Split(os.Getenv("STEPSHIM_KIT_NODES"), ",")
	if len(nodes) < 3 || nodes[2] == "" {
		t.Fatalf("STEPSHIM_KIT_NODES names %q; the test needs three nodes", nodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w, _, _ := connect(t, ctx, e)
	on := func(name, node string, from *ImageFrom) StepSpec {
		s := StepSpec{Name: name, Image: e.stepImage, Delivery: e.image(t),
			NodeSelector: map[string]string{"kubernetes.io/hostname": node}}
		if from != nil {
			s.Image, s.ImageFrom = "", from
		}
		return s
	}
	for _, s := range []StepSpec{on("xa", nodes[0], nil), on("xb", nodes[1], nil)} {
		if _, err := w.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	ipA, err := w.WaitReady(ctx, "xa")
	if err != nil {
		t.Fatal(err)
	}
	a, err := w.Connect(ctx, "xa")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8<<20)
	_, _ = rand.Read(data)
	if err := a.PutFiles(ctx, "/build/out", tarOf(t, map[string][]byte{"bin.dat": data})); err != nil {
		t.Fatal(err)
	}
	mkImage := `mkdir -p /build/img/rootfs/tmp && cp -a /bin /sbin /usr /etc /build/img/rootfs/ &&
echo across-nodes > /build/img/rootfs/marker && echo '{"env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}' > /build/img/metadata.json`
	if _, stderr, status := run(t, ctx, a, nil, "sh", "-c", mkImage); status != 0 {
		t.Fatalf("making A's image: %d %s", status, stderr)
	}
	// B on the second node pulls A's artifact from the first.
	copyP2P(t, ctx, w, a, "xb", data)
	ipB, err := w.WaitReady(ctx, "xb")
	if err != nil {
		t.Fatal(err)
	}
	checkTLS(t, ctx, w, "xb", ipB)
	// C on the third node runs in A's image: its kubelet pulls it through its own node's forwarder.
	if _, err := w.Create(ctx, on("xc", nodes[2], &ImageFrom{Pod: "xa", Path: "/build/img"})); err != nil {
		t.Fatal(err)
	}
	ipC, err := w.WaitReady(ctx, "xc")
	if err != nil {
		t.Fatalf("C in A's image on %s: %v", nodes[2], err)
	}
	for name, want := range map[string]string{"xa": nodes[0], "xb": nodes[1], "xc": nodes[2]} {
		if got := w.Get(name).Spec.NodeName; got != want {
			t.Fatalf("%s runs on %s, want %s", name, got, want)
		}
	}
	ok("A (%s) on %s, B (%s) on %s, C (%s) on %s", ipA, nodes[0], ipB, nodes[1], ipC, nodes[2])
	direct, err := w.Connect(ctx, "xc")
	if err != nil {
		t.Fatal(err)
	}
	viaProxy, err := w.ConnectViaProxy(ctx, "xc")
	if err != nil {
		t.Fatal(err)
	}
	for how, c := range map[string]*shim.Client{"at its pod IP": direct, "through the apiserver's proxy": viaProxy} {
		out, stderr, status := run(t, ctx, c, nil, "cat", "/marker")
		if status != 0 || out != "across-nodes\n" {
			t.Fatalf("C %s: %q %q %d, want A's image's marker", how, out, stderr, status)
		}
	}
	ok("C runs in A's image, pulled across nodes through %s's forwarder; it answers at its pod IP and through the apiserver's proxy", nodes[2])
	var buf bytes.Buffer
	if err := direct.GetFiles(ctx, "/marker", &buf); err != nil || buf.Len() == 0 {
		t.Fatalf("C's files: %v", err)
	}
	for _, p := range []string{"xa", "xb", "xc"} {
		_ = w.Delete(context.WithoutCancel(ctx), p)
	}
}
