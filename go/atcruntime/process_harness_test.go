// Test harness of the container and process tests: the real stepshim binary built by cargo on
// 127.0.0.1:0, a Container on it, and a pod life the test sets (the informer's part is the cluster
// test's, cluster_test.go).

package atcruntime

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

// runShim starts the shim with a random token until the end of the test and returns a client.
func runShim(t *testing.T) *shim.Client {
	t.Helper()
	var raw [32]byte
	_, _ = crand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	p, err := startShim(t, token, "warn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("shim log:\n%s", p.log.String())
		}
	})
	c, err := shim.New("http://"+p.addr, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testPod is a pod life set by the test.
type testPod struct {
	mu      sync.Mutex
	changed chan struct{}
	end     *PodGoneError
}

func (p *testPod) watch() (<-chan struct{}, *PodGoneError) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed, p.end
}

func (p *testPod) gone() *PodGoneError {
	_, g := p.watch()
	return g
}

// kill ends the pod with reason.
func (p *testPod) kill(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.end = &PodGoneError{Pod: "step", Reason: reason, Message: "by the test"}
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// testContainer is a Container on a fresh shim, stopping processes after grace.
func testContainer(t *testing.T, grace time.Duration) (*Container, *testPod) {
	t.Helper()
	pod := &testPod{}
	cfg := &Config{StopGrace: grace, RequestTimeout: 10 * time.Second}
	return &Container{handle: "step", client: runShim(t), pod: pod, cfg: cfg}, pod
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 10 ms until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer a stream may write while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
