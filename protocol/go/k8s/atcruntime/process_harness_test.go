// Test harness of the container and process tests: the real stepshim binary built by cargo on
// 127.0.0.1:0, a Container on it, and a pod life the test sets (the informer's part is the cluster
// test's, cluster_test.go).

package atcruntime

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	shim "stepshim.dev/protocol/go"
)

// shimBin is $STEPSHIM_BIN, else the cargo debug build of this repository.
func shimBin(t *testing.T) string {
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
		t.Fatalf("stepshim binary not found at %s (%v): run `cargo build -p stepshim` in the repository root, "+
			"or set STEPSHIM_BIN", bin, err)
	}
	return bin
}

// runShim starts the shim with a random token until the end of the test and returns a client.
func runShim(t *testing.T) *shim.Client {
	t.Helper()
	var raw [32]byte
	_, _ = crand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(token))
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(shimBin(t))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPSHIM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "STEPSHIM_READY_FILE="+ready, "STEPSHIM_LISTEN=127.0.0.1:0",
		"STEPSHIM_TOKEN_SHA256="+hex.EncodeToString(sum[:]), "STEPSHIM_LOG=warn",
		"STEPSHIM_DATA_DIR="+t.TempDir(), "STEPSHIM_GRACE_SECONDS=1", "NO_COLOR=1")
	var log syncBuffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("shim log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			c, err := shim.New("http://"+strings.TrimSpace(string(b)), token)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		select {
		case <-exited:
			t.Fatalf("stepshim exited before it was ready:\n%s", log.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("stepshim wrote no ready file within 15s")
		}
	}
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
