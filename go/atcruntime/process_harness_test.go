// Test harness of the container and process tests: the real stepshim binary built by cargo on
// 127.0.0.1:0, a Container on it, and a pod life the test sets (the informer's part is the cluster
// test's, cluster_test.go).

package atcruntime

import (
	crand "crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

// runShim starts the shim with a random token until the end of the test and returns a client.
func runShim(t *testing.T) *shim.Client {
	t.Helper()
	var raw [32]byte
	_, _ = crand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	p, err := shimtest.Start(t, token, shimtest.Options{Log: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := shim.New("http://"+p.Addr, token)
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
