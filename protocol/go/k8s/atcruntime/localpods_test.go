// Test harness: "pods" that are real stepshim processes on 127.0.0.1, one per pod name, each with the
// token the worker's key derives for it, so that volumes, P2P copies (real pulls between two shims
// with real grants) and the holder run against the real shim without a cluster. Only the pod objects
// are made up: a running shim is a ready pod at 127.0.0.1 whose shim listens on its own port.

package atcruntime

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	shim "stepshim.dev/protocol/go"
	"stepshim.dev/protocol/go/k8s"
)

type localShim struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	log    *bytes.Buffer
	logMu  *sync.Mutex
}

// localPods is a worker of shim processes. onDelete runs after a pod's shim is stopped.
type localPods struct {
	t        *testing.T
	name, ns string
	key      k8s.Key
	mu       sync.Mutex
	shims    map[string]*localShim
	created  int
	onDelete func(pod string)
}

func newLocalPods(t *testing.T, worker string) *localPods {
	t.Helper()
	raw := make([]byte, 32)
	copy(raw, worker+"-0123456789abcdef0123456789abcdef")
	key, err := k8s.NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	lp := &localPods{t: t, name: worker, ns: "test", key: key, shims: map[string]*localShim{}}
	t.Cleanup(func() {
		lp.mu.Lock()
		names := make([]string, 0, len(lp.shims))
		for n := range lp.shims {
			names = append(names, n)
		}
		lp.mu.Unlock()
		for _, n := range names {
			lp.stop(n, t.Failed())
		}
	})
	return lp
}

func shimBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STEPSHIM_BIN")
	if bin == "" {
		abs, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "target", "debug", "stepshim"))
		if err != nil {
			t.Fatal(err)
		}
		bin = abs
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("stepshim binary not found at %s (%v): run `cargo build -p stepshim`, or set STEPSHIM_BIN", bin, err)
	}
	return bin
}

// start runs a shim for pod.
func (lp *localPods) start(pod string) error {
	t := lp.t
	sum := sha256.Sum256([]byte(lp.Token(pod)))
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(shimBinary(t))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPSHIM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "STEPSHIM_READY_FILE="+ready, "STEPSHIM_LISTEN=127.0.0.1:0",
		"STEPSHIM_TOKEN_SHA256="+hex.EncodeToString(sum[:]), "STEPSHIM_LOG=info",
		"STEPSHIM_DATA_DIR="+t.TempDir(), "STEPSHIM_GRACE_SECONDS=1", "NO_COLOR=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ls := &localShim{cmd: cmd, exited: make(chan struct{}), log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	go func() { _ = cmd.Wait(); close(ls.exited) }()
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			ls.logMu.Lock()
			ls.log.WriteString(sc.Text() + "\n")
			ls.logMu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			ls.addr = strings.TrimSpace(string(b))
			break
		}
		select {
		case <-ls.exited:
			return fmt.Errorf("shim of %s exited: %s", pod, ls.log.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shim of %s not ready within 15s", pod)
		}
	}
	lp.mu.Lock()
	lp.shims[pod] = ls
	lp.created++
	lp.mu.Unlock()
	return nil
}

// startPod runs a shim for pod or fails the test.
func (lp *localPods) startPod(pod string) {
	lp.t.Helper()
	if err := lp.start(pod); err != nil {
		lp.t.Fatal(err)
	}
}

func (lp *localPods) stop(pod string, showLog bool) {
	lp.mu.Lock()
	ls := lp.shims[pod]
	delete(lp.shims, pod)
	lp.mu.Unlock()
	if ls == nil {
		return
	}
	_ = ls.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ls.exited:
	case <-time.After(5 * time.Second):
		_ = ls.cmd.Process.Kill()
		<-ls.exited
	}
	if showLog {
		ls.logMu.Lock()
		lp.t.Logf("shim log of %s:\n%s", pod, ls.log.String())
		ls.logMu.Unlock()
	}
	if lp.onDelete != nil {
		lp.onDelete(pod)
	}
}

func (lp *localPods) get(pod string) *localShim {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.shims[pod]
}

func (lp *localPods) Name() string            { return lp.name }
func (lp *localPods) Namespace() string       { return lp.ns }
func (lp *localPods) Token(pod string) string { return lp.key.Token(lp.ns, pod) }
func (lp *localPods) Delete(_ context.Context, pod string) error {
	lp.stop(pod, false)
	return nil
}

func (lp *localPods) Connect(_ context.Context, pod string) (*shim.Client, error) {
	ls := lp.get(pod)
	if ls == nil {
		return nil, fmt.Errorf("no pod %s", pod)
	}
	return shim.New("http://"+ls.addr, lp.Token(pod))
}

func (lp *localPods) PullSource(pod string) (string, string, error) {
	ls := lp.get(pod)
	if ls == nil {
		return "", "", fmt.Errorf("no pod %s", pod)
	}
	return "http://" + ls.addr, "", nil
}

// Get is a ready pod while pod's shim runs.
func (lp *localPods) Get(pod string) *corev1.Pod {
	if lp.get(pod) == nil {
		return nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: lp.ns},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func (lp *localPods) Create(_ context.Context, spec k8s.StepSpec) (*corev1.Pod, error) {
	if lp.get(spec.Name) != nil {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, spec.Name)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := lp.start(spec.Name); err != nil {
		return nil, err
	}
	return lp.Get(spec.Name), nil
}

func (lp *localPods) WaitReady(_ context.Context, pod string) (string, error) {
	if lp.get(pod) == nil {
		return "", fmt.Errorf("no pod %s", pod)
	}
	return "127.0.0.1", nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testStore is a store over local pods whose holder keeps its volumes under a directory removed
// when the holder is deleted (a pod's file system goes with it).
func testStore(t *testing.T, lp *localPods) (*volumeStore, string) {
	holderDir := filepath.Join(t.TempDir(), "holder")
	s := newStore(lp, VolumeConfig{
		Holder:    k8s.StepSpec{Image: "step:dev", Delivery: k8s.FromConfigMap("stepshim")},
		HolderDir: holderDir,
		Logf:      t.Logf,
	})
	lp.onDelete = func(pod string) {
		if pod == s.holder {
			_ = os.RemoveAll(holderDir)
		}
	}
	return s, holderDir
}
