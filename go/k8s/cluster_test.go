//go:build cluster

// The Go kit against a real cluster, as a worker holding only the RBAC `stepctl manifests` prints (no
// pods/exec). tests/cluster/tests.d/30-go-kit builds this test binary once and runs it twice, as ATC
// would run across a restart of its own: TestKitStart checks the credentials, creates pods, runs
// processes, streams stdin and files through the shim and leaves a process running, then ends part
// way through its output; TestKitResume, a new process knowing only the key file and what ATC would
// have stored (pod, process id, offset), re-derives the token, resumes the output at that offset, then
// collects garbage and retires. Each check prints one "30-go-kit: ok:" line.

package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

func ok(format string, args ...any) { fmt.Printf("30-go-kit: ok: "+format+"\n", args...) }

// tickerLines is the ticker's whole output: 80 lines over about 4 seconds, then exit 3.
const tickerLines = 80

var tickerSpec = shim.Spec{Path: "sh", Args: []string{"-c",
	fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo line $i; i=$((i+1)); sleep 0.05; done; exit 3`, tickerLines)}}

func tickerWant() string {
	var b strings.Builder
	for i := 1; i <= tickerLines; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestKitStart(t *testing.T) {
	e := readEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	w, counts, _ := connect(t, ctx, e)

	h, err := w.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.OK || len(h.Warnings()) > 0 {
		t.Fatalf("check: want every pod verb and no exec right: %+v", h)
	}
	plain, err := Clientset(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := plain.Discovery().ServerVersion(); err != nil || v.GitVersion != h.ServerVersion {
		t.Fatalf("Clientset(%s): version %v, %v", e.kubeconfig, v, err)
	}
	ok("check: pods get/list/watch/create/delete allowed, pods/exec, attach, portforward not (apiserver %s)", h.ServerVersion)

	main := StepSpec{Name: "kit-main", Image: e.stepImage, Build: "go-kit", Step: "main",
		Delivery: e.image(t), Env: []EnvVar{{Name: "KIT", Value: "yes"}}}
	peer := StepSpec{Name: "kit-peer", Image: e.stepImage, Delivery: e.image(t)}
	noImage := StepSpec{Name: "kit-noimage", Image: "stepshim.local/does-not-exist:1",
		ImagePullPolicy: "Never", Delivery: e.image(t)}
	unschedulable := StepSpec{Name: "kit-unschedulable", Image: e.stepImage, Delivery: e.image(t),
		NodeSelector: map[string]string{"stepshim.dev/no-such-node": "true"}}
	for _, s := range []StepSpec{main, peer, noImage, unschedulable} {
		pod, err := w.Create(ctx, s)
		if err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
		raw, _ := json.Marshal(pod)
		if want := TokenSHA256(w.Token(s.Name)); !bytes.Contains(raw, []byte(want)) || bytes.Contains(raw, []byte(w.Token(s.Name))) {
			t.Fatalf("pod %s as stored: want the token's hash and never the token", s.Name)
		}
		if PodTLS(pod) != s.Delivery.TLS() {
			t.Fatalf("pod %s as stored: TLS %v, want %v", s.Name, PodTLS(pod), s.Delivery.TLS())
		}
	}
	ok("created 4 pods; as stored they carry each token's SHA-256 and never the token (TLS seed: %v)", main.Delivery.TLS())

	start := time.Now()
	var stages []string
	ip, err := w.WaitProgress(ctx, main.Name, func(p Progress) {
		if len(stages) == 0 || stages[len(stages)-1] != string(p.Stage) {
			stages = append(stages, string(p.Stage))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ok("%s ready at %s after %v (stages %s)", main.Name, ip, time.Since(start).Round(time.Millisecond), strings.Join(stages, " > "))

	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	_, err = w.WaitReady(fctx, noImage.Name)
	fcancel()
	var failed *PodFailedError
	if !errors.As(err, &failed) || failed.Reason != "ErrImageNeverPull" {
		t.Fatalf("missing image: want a PodFailedError with ErrImageNeverPull, got %v", err)
	}
	ok("missing image fails with Kubernetes' reason: %v", err)

	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = w.WaitReady(sctx, unschedulable.Name)
	scancel()
	var notReady *NotReadyError
	if !errors.As(err, &notReady) || notReady.Last.Stage != Scheduling || !strings.Contains(notReady.Last.Detail, "node") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unschedulable: want a NotReadyError still scheduling with the scheduler's message, got %v", err)
	}
	ok("unschedulable pod times out saying so: %v", err)

	c, err := w.Connect(ctx, main.Name)
	if err != nil {
		t.Fatal(err)
	}
	if main.Delivery.TLS() {
		checkTLS(t, ctx, w, main.Name, ip)
	}
	out, errOut, status := run(t, ctx, c, nil, "sh", "-c", `echo "to-out $KIT"; echo to-err >&2; exit 7`)
	if out != "to-out yes\n" || errOut != "to-err\n" || status != 7 {
		t.Fatalf("run: stdout %q stderr %q status %d", out, errOut, status)
	}
	ok("a process ran through the shim: stdout, stderr, the pod's env and exit status 7")

	in := make([]byte, 3<<20)
	_, _ = rand.Read(in)
	text := hex.EncodeToString(in[:128<<10])
	out, _, status = run(t, ctx, c, strings.NewReader(text), "cat")
	if out != text || status != 0 {
		t.Fatalf("stdin through cat: %d of %d bytes back, status %d", len(out), len(text), status)
	}
	ok("stdin: %d bytes through cat and back", len(text))

	files := map[string][]byte{"a.txt": []byte("hello\n"), "bin.dat": in, "sub/x.sh": []byte("#!/bin/sh\necho x\n")}
	if err := c.PutFiles(ctx, "/build", tarOf(t, files)); err != nil {
		t.Fatal(err)
	}
	out, _, status = run(t, ctx, c, nil, "sh", "-c", "cd /build && sha256sum a.txt bin.dat sub/x.sh && sub/x.sh")
	for name, data := range files {
		if sum := sha256.Sum256(data); !strings.Contains(out, hex.EncodeToString(sum[:])+"  "+name) {
			t.Fatalf("files in: %s does not hash as sent; pod says %q", name, out)
		}
	}
	if status != 0 || !strings.HasSuffix(out, "x\n") {
		t.Fatalf("files in: the executable did not run: %q, status %d", out, status)
	}
	ok("files in: a tar of %d files (%d KiB) extracted, hashes match, modes kept", len(files), len(in)>>10)

	_, _, status = run(t, ctx, c, nil, "sh", "-c", "mkdir -p /build/out && seq 1 200000 > /build/out/seq.txt && cp /build/bin.dat /build/out/")
	if status != 0 {
		t.Fatalf("preparing files out: status %d", status)
	}
	var tarOut bytes.Buffer
	if err := c.GetFiles(ctx, "/build/out/", &tarOut); err != nil {
		t.Fatal(err)
	}
	size := tarOut.Len()
	got := untar(t, &tarOut)
	var seq strings.Builder
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&seq, "%d\n", i)
	}
	if got["seq.txt"] != seq.String() || got["bin.dat"] != string(in) {
		t.Fatalf("files out: seq.txt %d bytes (want %d), bin.dat %d bytes (want %d, same content %v)",
			len(got["seq.txt"]), seq.Len(), len(got["bin.dat"]), len(in), got["bin.dat"] == string(in))
	}
	ok("files out: a tar of the pod's files (%d KiB) arrived intact", size>>10)

	copyP2P(t, ctx, w, c, peer.Name, in)

	if _, err := c.Run(ctx, "ticker", tickerSpec); err != nil {
		t.Fatal(err)
	}
	var printed strings.Builder
	var offset int64
	stop := errors.New("ATC goes down")
	_, err = c.Follow(ctx, "ticker", 0, func(f shim.Frame) error {
		if f.Type == shim.FrameStdout {
			printed.Write(f.Payload)
		}
		offset = f.Offset + 8 + int64(len(f.Payload))
		if strings.Contains(printed.String(), "line 10\n") {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("following the ticker: %v", err)
	}
	st := state{Pod: main.Name, Process: "ticker", Offset: offset, Output: printed.String(),
		Others: []string{peer.Name, noImage.Name, unschedulable.Name}}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(e.state, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if counts.lists.Load()+counts.watches.Load() > 2 {
		t.Fatalf("the worker asked for pods more than once: %s", counts)
	}
	ok("the worker's informer made %s in this whole phase", counts)
	ok("ticker followed to line %d (log offset %d); this process now ends as ATC would", strings.Count(st.Output, "\n"), offset)
}

func TestKitResume(t *testing.T) {
	e := readEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var st state
	b, err := os.ReadFile(e.state)
	if err != nil {
		t.Fatalf("no state from TestKitStart: %v", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	w, counts, _ := connect(t, ctx, e)
	if w.Get(st.Pod) == nil {
		t.Fatalf("the new worker's cache has no pod %s: %v", st.Pod, w.List())
	}
	ok("a new worker (new process, key from its file) sees %d pods of its own", len(w.List()))

	other, _ := NewKey(bytes.Repeat([]byte{1}, 32))
	pod := w.Get(st.Pod)
	wrong, err := w.ShimAt(st.Pod, pod.Status.PodIP, PodTLS(pod))
	if err != nil {
		t.Fatal(err)
	}
	wrong = wrong.WithGrantToken(other.Token(e.namespace, st.Pod))
	if _, err := wrong.Info(ctx); !shim.IsUnauthorized(err) {
		t.Fatalf("a token of another key: want 401, got %v", err)
	}
	c, err := w.Shim(st.Pod)
	if err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	exit, err := c.Follow(ctx, st.Process, st.Offset, func(f shim.Frame) error {
		if f.Type == shim.FrameStdout {
			rest.Write(f.Payload)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Output+rest.String() != tickerWant() || exit.Status != 3 {
		t.Fatalf("resumed output: %d + %d bytes, want %d in all; exit %d, want 3", len(st.Output), rest.Len(), len(tickerWant()), exit.Status)
	}
	ok("another key's token gets 401; the re-derived one resumed at offset %d: %d more lines, none lost or repeated, exit 3",
		st.Offset, strings.Count(rest.String(), "\n"))

	cm := StepSpec{Name: "kit-configmap", Image: e.stepImage, Delivery: FromConfigMap(e.configMap)}
	if _, err := w.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WaitReady(ctx, cm.Name); err != nil {
		t.Fatal(err)
	}
	cc, err := w.Shim(cm.Name)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, status := run(t, ctx, cc, nil, "sh", "-c", "echo via-configmap"); out != "via-configmap\n" || status != 0 {
		t.Fatalf("configmap delivery: %q, status %d", out, status)
	}
	if PodTLS(w.Get(cm.Name)) || !strings.HasPrefix(cc.BaseURL(), "http://") {
		t.Fatalf("configmap delivery: TLS %v, client %s; want the plain build", PodTLS(w.Get(cm.Name)), cc.BaseURL())
	}
	ok("ConfigMap delivery: %s ready (plain HTTP), ran a process", cm.Name)

	deleted, err := w.GC(ctx, []string{st.Pod}, time.Hour)
	if err != nil || len(deleted) != 0 {
		t.Fatalf("gc within the grace period deleted %v (%v)", deleted, err)
	}
	deleted, err = w.GC(ctx, []string{st.Pod}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(st.Others), cm.Name)
	slices.Sort(want)
	if !slices.Equal(deleted, want) {
		t.Fatalf("gc deleted %v, want %v", deleted, want)
	}
	start := time.Now()
	for _, name := range want {
		if err := w.WaitGone(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if w.Get(st.Pod) == nil {
		t.Fatal("gc deleted the desired pod")
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("the kept pod's shim: %v", err)
	}
	ok("gc: nothing inside an hour's grace; with none, deleted %v (gone from the cache in %v), kept %s",
		deleted, time.Since(start).Round(time.Millisecond), st.Pod)

	retired, err := w.Retire(ctx)
	if err != nil || !slices.Equal(retired, []string{st.Pod}) {
		t.Fatalf("retire deleted %v (%v)", retired, err)
	}
	if err := w.WaitGone(ctx, st.Pod); err != nil {
		t.Fatal(err)
	}
	if len(w.List()) != 0 {
		t.Fatalf("pods left after retire: %v", w.List())
	}
	ok("retire deleted %v; the worker has no pods", retired)
	if counts.lists.Load()+counts.watches.Load() > 2 {
		t.Fatalf("the worker asked for pods more than once: %s", counts)
	}
	ok("the worker's informer made %s in this whole phase", counts)
}
