// A node lost under a process (lost.go), played by a shim stopped with SIGSTOP: its connections are
// accepted by the kernel and answered by nobody. Wait fails with ReasonNodeLost within
// NodeLostAfter and a probe, and the pod is deleted at once; a shim that answers its probes, its
// process silent for longer than NodeLostAfter, is not taken for lost.

package atcruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

// stoppableContainer is a Container on a fresh shim whose process the test may stop, judged lost
// after lostAfter; deleted counts its deletions.
func stoppableContainer(t *testing.T, lostAfter time.Duration) (*Container, *shimtest.Proc, *atomic.Int32) {
	t.Helper()
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	proc, err := shimtest.Start(t, token, shimtest.Options{Log: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })
	client, err := shim.New("http://"+proc.Addr, token)
	if err != nil {
		t.Fatal(err)
	}
	deleted := &atomic.Int32{}
	c := &Container{handle: "step", client: client, pod: &testPod{}, node: "node-b",
		cfg:       &Config{StopGrace: time.Second, RequestTimeout: 2 * time.Second, NodeLostAfter: lostAfter},
		deleteNow: func(context.Context) error { deleted.Add(1); return nil }}
	c.withContact(shim.NewContact())
	return c, proc, deleted
}

func TestWaitEndsWhenTheNodeIsLost(t *testing.T) {
	c, proc, deleted := stoppableContainer(t, 3*time.Second)
	ctx := testCtx(t)
	p, err := c.Run(ctx, ProcessSpec{Path: "sh", Args: []string{"-c", "echo started; sleep 60"}}, ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = p.Wait(ctx)
	took := time.Since(start)
	var gone *PodGoneError
	if !errors.As(err, &gone) || gone.Reason != ReasonNodeLost || !strings.Contains(gone.Message, "node node-b") {
		t.Fatalf("Wait after the shim stopped: %v, want a PodGoneError of reason %s naming the node", err, ReasonNodeLost)
	}
	if took > 3*time.Second+3*time.Second {
		t.Fatalf("Wait took %v to see the node lost, NodeLostAfter 3s", took)
	}
	if deleted.Load() != 1 {
		t.Fatalf("the pod was deleted %d times, want once", deleted.Load())
	}
	t.Logf("lost after %v: %v", took.Round(100*time.Millisecond), gone)
}

func TestASilentProcessIsNotALostNode(t *testing.T) {
	c, _, deleted := stoppableContainer(t, 2*time.Second)
	ctx := testCtx(t)
	p, err := c.Run(ctx, ProcessSpec{Path: "sleep", Args: []string{"5"}}, ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.ExitStatus != 0 || deleted.Load() != 0 {
		t.Fatalf("a process silent for 5 s, NodeLostAfter 2 s: %+v, %v, %d deletions", res, err, deleted.Load())
	}
}
