// Test harness: "pods" that are real stepshim processes on 127.0.0.1, one per pod name, each with the
// token the worker's key derives for it, so that volumes, P2P copies (real pulls between two shims
// with real grants) and the holder run against the real shim without a cluster. Only the pod objects
// are made up: a running shim is a ready pod at 127.0.0.1 whose shim listens on its own port.

package atcruntime

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

// localPods is a worker of shim processes. onDelete runs after a pod's shim is stopped.
type localPods struct {
	t        *testing.T
	name, ns string
	key      k8s.Key
	mu       sync.Mutex
	shims    map[string]*shimtest.Proc
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
	lp := &localPods{t: t, name: worker, ns: "test", key: key, shims: map[string]*shimtest.Proc{}}
	t.Cleanup(func() {
		lp.mu.Lock()
		names := make([]string, 0, len(lp.shims))
		for n := range lp.shims {
			names = append(names, n)
		}
		lp.mu.Unlock()
		for _, n := range names {
			lp.stop(n)
		}
	})
	return lp
}

// start runs a shim for pod.
func (lp *localPods) start(pod string) error {
	ls, err := shimtest.Start(lp.t, lp.Token(pod), shimtest.Options{})
	if err != nil {
		return fmt.Errorf("shim of %s: %w", pod, err)
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

func (lp *localPods) stop(pod string) {
	lp.mu.Lock()
	ls := lp.shims[pod]
	delete(lp.shims, pod)
	lp.mu.Unlock()
	if ls == nil {
		return
	}
	ls.Stop()
	if lp.onDelete != nil {
		lp.onDelete(pod)
	}
}

func (lp *localPods) get(pod string) *shimtest.Proc {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.shims[pod]
}

func (lp *localPods) Name() string            { return lp.name }
func (lp *localPods) Namespace() string       { return lp.ns }
func (lp *localPods) Token(pod string) string { return lp.key.Token(lp.ns, pod) }
func (lp *localPods) Delete(_ context.Context, pod string) error {
	lp.stop(pod)
	return nil
}

// DeleteNow is Delete of a pod whose shim may be stopped (SIGSTOP, a lost node): it is continued
// first, so that it can stop.
func (lp *localPods) DeleteNow(_ context.Context, pod string) error {
	if p := lp.get(pod); p != nil {
		_ = p.Signal(syscall.SIGCONT)
	}
	lp.stop(pod)
	return nil
}

func (lp *localPods) Connect(_ context.Context, pod string) (*shim.Client, error) {
	ls := lp.get(pod)
	if ls == nil {
		return nil, fmt.Errorf("no pod %s", pod)
	}
	return shim.New("http://"+ls.Addr, lp.Token(pod))
}

func (lp *localPods) PullSource(pod string) (string, string, error) {
	ls := lp.get(pod)
	if ls == nil {
		return "", "", fmt.Errorf("no pod %s", pod)
	}
	return "http://" + ls.Addr, "", nil
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

// twoPods is the set-up of the streaming tests: local pods step-a and step-b of worker w1, a store
// over them, and a directory of step-a holding files.
func twoPods(t *testing.T, files map[string][]byte) (lp *localPods, s *volumeStore, src string) {
	lp = newLocalPods(t, "w1")
	lp.startPod("step-a")
	lp.startPod("step-b")
	s, _ = testStore(t, lp)
	src = t.TempDir()
	writeTree(t, src, files)
	return lp, s, src
}

// streamOut is the whole of v's stream of path in compression c.
func streamOut(ctx context.Context, t *testing.T, v Artifact, path string, c Compression) []byte {
	t.Helper()
	rc, err := v.StreamOut(ctx, path, c)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
