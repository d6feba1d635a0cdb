// Tests of Container and Process semantics against the real shim: Run's ctx bounds only the start,
// Wait's ctx stops the process (TERM, grace with output, KILL), AttachFrom resumes without a byte
// twice, generated ids are deleted after Wait, a missing executable is typed, the pod's end fails
// Wait at once.

package atcruntime

import (
	"context"
	"errors"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

func sh(script string) ProcessSpec {
	return ProcessSpec{Path: "/bin/sh", Args: []string{"-c", script}}
}

func TestRunCtxBoundsOnlyTheStart(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	runCtx, cancel := context.WithCancel(shimtest.Context(t))
	var out shimtest.Buffer
	p, err := c.Run(runCtx, sh("echo start; sleep 0.5; echo end; exit 3"), ProcessIO{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	res, err := p.Wait(shimtest.Context(t))
	if err != nil || res.ExitStatus != 3 || res.Signal != "" {
		t.Fatalf("result %+v err %v, want status 3 after the Run ctx ended", res, err)
	}
	if out.String() != "start\nend\n" {
		t.Fatalf("output %q, want all of it", out.String())
	}
}

func TestWaitCancelTermsAndKeepsOutputDuringGrace(t *testing.T) {
	c, _ := testContainer(t, 5*time.Second)
	var out shimtest.Buffer
	p, err := c.Run(shimtest.Context(t), sh(`trap 'echo got TERM; sleep 0.3; echo bye; exit 7' TERM
echo ready; while :; do sleep 0.05; done`), ProcessIO{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	shimtest.Eventually(t, 10*time.Second, "ready", func() bool { return strings.Contains(out.String(), "ready") })
	ctx, cancel := context.WithCancel(shimtest.Context(t))
	cancel()
	start := time.Now()
	_, err = p.Wait(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: err %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("Wait took %v: the process exited on TERM, no need to wait out the grace", d)
	}
	if out.String() != "ready\ngot TERM\nbye\n" {
		t.Fatalf("output %q: the output during the grace period is lost", out.String())
	}
	if _, err := c.client.Status(shimtest.Context(t), p.ID()); !shim.IsNotFound(err) {
		t.Fatalf("the stopped process is still in the shim: %v", err)
	}
}

func TestWaitCancelKillsAfterGrace(t *testing.T) {
	const grace = 1500 * time.Millisecond
	c, _ := testContainer(t, grace)
	var out shimtest.Buffer
	p, err := c.Run(shimtest.Context(t), ProcessSpec{ID: "task", Path: "/bin/sh", Args: []string{"-c",
		`trap 'echo caught' TERM; echo ready; while :; do sleep 0.05; done`}}, ProcessIO{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	shimtest.Eventually(t, 10*time.Second, "ready", func() bool { return strings.Contains(out.String(), "ready") })
	ctx, cancel := context.WithCancel(shimtest.Context(t))
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err = p.Wait(ctx)
	d := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: err %v, want context.Canceled", err)
	}
	if d < grace || d > grace+5*time.Second {
		t.Fatalf("Wait took %v, want the grace period of %v and then a KILL", d, grace)
	}
	if !strings.Contains(out.String(), "caught") {
		t.Fatalf("output %q: the trap's output during the grace period is lost", out.String())
	}
	// Stopped, even with an id of the caller's: it is gone.
	if _, err := c.client.Status(shimtest.Context(t), "task"); !shim.IsNotFound(err) {
		t.Fatalf("the killed process is still in the shim: %v", err)
	}
}

// gateWriter writes into buf until it holds at least after bytes, then blocks until released: the
// process's offset then stands just past the bytes in buf.
type gateWriter struct {
	buf     shimtest.Buffer
	after   int
	once    sync.Once
	blocked chan struct{}
	release chan struct{}
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if len(g.buf.String()) >= g.after {
		g.once.Do(func() { close(g.blocked) })
		<-g.release
	}
	return g.buf.Write(p)
}

func TestAttachFromOffsetWritesNoByteTwice(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	ctx := shimtest.Context(t)
	script := `for i in $(seq 1 60); do echo "line $i"; echo "err $i" >&2; sleep 0.01; done`
	gate := &gateWriter{after: 100, blocked: make(chan struct{}), release: make(chan struct{})}
	p1, err := c.Run(ctx, ProcessSpec{ID: "task", Path: "/bin/sh", Args: []string{"-c", script}},
		ProcessIO{Stdout: gate, Stderr: gate})
	if err != nil {
		t.Fatal(err)
	}
	<-gate.blocked
	// The caller kept these two; a new caller resumes from the offset.
	offset, before := p1.Offset(), gate.buf.String()
	if offset <= 0 {
		t.Fatalf("offset %d after %d bytes written", offset, len(before))
	}
	var rest shimtest.Buffer
	p2, err := c.AttachFrom(ctx, "task", offset, ProcessIO{Stdout: &rest, Stderr: &rest})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p2.Wait(ctx)
	if err != nil || res.ExitStatus != 0 {
		t.Fatalf("resumed Wait: %+v %v", res, err)
	}
	var want strings.Builder
	for i := 1; i <= 60; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\nerr " + strconv.Itoa(i) + "\n")
	}
	if got := before + rest.String(); sortedLines(got) != sortedLines(want.String()) {
		t.Fatalf("kept %q + resumed %q is not each line once", before, rest.String())
	}
	// Attach continues where the writers last had it: p2 wrote everything, so nothing is left.
	var all shimtest.Buffer
	p3, err := c.Attach(ctx, "task", ProcessIO{Stdout: &all, Stderr: &all})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p3.Wait(ctx); err != nil || res.ExitStatus != 0 || all.String() != "" {
		t.Fatalf("Attach after everything was delivered: %+v %v, wrote %q", res, err, all.String())
	}
	close(gate.release)
	if _, err := p1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Status alone, after the fact; the caller's id is kept after Wait.
	if res, exited, err := c.Status(ctx, "task"); err != nil || !exited || res.ExitStatus != 0 {
		t.Fatalf("Status: %+v %v %v", res, exited, err)
	}
	if _, err := c.AttachFrom(ctx, "task", 3, ProcessIO{}); err == nil {
		t.Fatal("AttachFrom at offset 3, inside the first frame: no error")
	}
	if _, err := c.AttachFrom(ctx, "task", 1<<40, ProcessIO{}); err == nil {
		t.Fatal("AttachFrom past the log's end: no error")
	}
	if _, err := c.Attach(ctx, "nobody", ProcessIO{}); !shim.IsNotFound(err) {
		t.Fatalf("Attach to an unknown id: %v", err)
	}
}

func TestTTYAndSetTTY(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	ctx := shimtest.Context(t)
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var out shimtest.Buffer
	// A zero size is 80x24, as Garden gives a hijacked process without one.
	p, err := c.Run(ctx, ProcessSpec{Path: "sh", Args: []string{"-c", "stty size; read x; stty size"},
		TTY: &TTYSpec{}}, ProcessIO{Stdin: stdinR, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	shimtest.Eventually(t, 20*time.Second, "the first stty size", func() bool { return strings.Contains(out.String(), "24 80") })
	if err := p.SetTTY(TTYSpec{WindowSize: WindowSize{Columns: 120, Rows: 40}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stdinW.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.ExitStatus != 0 {
		t.Fatalf("result %+v err %v; output %q", res, err, out.String())
	}
	if !regexp.MustCompile(`(?s)24 80.*40 120`).MatchString(out.String()) {
		t.Fatalf("the resize did not show: %q", out.String())
	}
	if err := p.SetTTY(TTYSpec{}); !shim.HasCode(err, shim.CodeNotRunning) && !shim.IsNotFound(err) {
		t.Fatalf("resize after exit: err = %v", err)
	}
	// Without a tty there is nothing to resize.
	q, err := c.Run(ctx, ProcessSpec{ID: "plain", Path: "sleep", Args: []string{"5"}}, ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetTTY(TTYSpec{WindowSize: WindowSize{Columns: 100, Rows: 30}}); !shim.HasCode(err, shim.CodeNoTTY) {
		t.Fatalf("resize without a tty: err = %v", err)
	}
}

// waitDelivered waits until the shim records offset as delivered for process id.
func waitDelivered(t *testing.T, c *Container, id string, offset int64) {
	t.Helper()
	shimtest.Eventually(t, 10*time.Second, "the delivered offset in the shim", func() bool {
		n, err := c.Delivered(id)
		return err == nil && n == offset
	})
}

func TestAttachContinuesWhereTheLogEnded(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	ctx := shimtest.Context(t)
	script := `for i in $(seq 1 40); do echo "line $i"; sleep 0.02; done; exit 3`
	// The first web node's log takes 60 bytes, then its writes hang: the node is gone.
	gate := &gateWriter{after: 60, blocked: make(chan struct{}), release: make(chan struct{})}
	defer close(gate.release)
	p1, err := c.Run(ctx, ProcessSpec{ID: "task", Path: "/bin/sh", Args: []string{"-c", script}},
		ProcessIO{Stdout: gate})
	if err != nil {
		t.Fatal(err)
	}
	<-gate.blocked
	kept := gate.buf.String()
	waitDelivered(t, c, "task", p1.Offset())
	// A new web node does what ATC's task step does: Attach with the build log's writer, no offset.
	var rest shimtest.Buffer
	p2, err := c.Attach(ctx, "task", ProcessIO{Stdout: &rest})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p2.Wait(ctx)
	if err != nil || res.ExitStatus != 3 {
		t.Fatalf("re-attached Wait: %+v %v", res, err)
	}
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if kept+rest.String() != want.String() {
		t.Fatalf("the build log across the restart is not every line once:\nkept %q\nthen %q", kept, rest.String())
	}
	// After the exit, a third attach gets the result and nothing of the output.
	var none shimtest.Buffer
	p3, err := c.Attach(ctx, "task", ProcessIO{Stdout: &none})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p3.Wait(ctx); err != nil || res.ExitStatus != 3 || none.String() != "" {
		t.Fatalf("attach after the exit: %+v %v, wrote %q", res, err, none.String())
	}
}

func TestResourceAttachReplaysStdoutOnly(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	ctx := shimtest.Context(t)
	script := `echo fetching >&2; echo '{"version":{"ref":"1"}}'; echo done >&2`
	var out, logged shimtest.Buffer
	p, err := c.Run(ctx, ProcessSpec{ID: ResourceProcessID, Path: "/bin/sh", Args: []string{"-c", script}},
		ProcessIO{Stdout: &out, Stderr: &logged})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, c, ResourceProcessID, p.Offset())
	// ATC's resource step after a restart: a fresh buffer for the answer, the build log for stderr.
	var out2, logged2 shimtest.Buffer
	p2, err := c.Attach(ctx, ResourceProcessID, ProcessIO{Stdout: &out2, Stderr: &logged2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if out2.String() != out.String() || out.String() != "{\"version\":{\"ref\":\"1\"}}\n" || logged2.String() != "" {
		t.Fatalf("re-attached resource: stdout %q (first %q), stderr %q (first %q)",
			out2.String(), out.String(), logged2.String(), logged.String())
	}
}

// sortedLines compares outputs whose stdout and stderr interleave in any order.
func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func TestGeneratedIDsAreDeletedAfterWait(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	ctx := shimtest.Context(t)
	for i := 0; i < 5; i++ {
		p, err := c.Run(ctx, sh("echo hi"), ProcessIO{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.ID(), "atc-") {
			t.Fatalf("generated id %q", p.ID())
		}
		if res, err := p.Wait(ctx); err != nil || res.ExitStatus != 0 {
			t.Fatalf("%+v %v", res, err)
		}
	}
	p, err := c.Run(ctx, ProcessSpec{ID: "kept", Path: "true"}, ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := c.client.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "kept" {
		t.Fatalf("the shim remembers %+v, want only the process whose id the caller gave", list)
	}
}

func TestExecutableNotFoundIsTyped(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	_, err := c.Run(shimtest.Context(t), ProcessSpec{Path: "/no/such/program"}, ProcessIO{})
	var enf *ExecutableNotFoundError
	if !errors.As(err, &enf) || enf.Path != "/no/such/program" || !errors.Is(err, shim.ErrExecutableNotFound) {
		t.Fatalf("err %v (%T), want an *ExecutableNotFoundError", err, err)
	}
}

func TestResultNamesTheSignal(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	ctx := shimtest.Context(t)
	p, err := c.Run(ctx, sh("kill -KILL $$"), ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.ExitStatus != 137 || res.Signal != "SIGKILL" {
		t.Fatalf("result %+v err %v, want 137 by SIGKILL", res, err)
	}
	if SignalName(15) != "SIGTERM" || SignalName(34) != "SIG34" || SignalName(0) != "SIG0" {
		t.Fatal("signal names")
	}
}

func TestPodEndFailsWaitAtOnce(t *testing.T) {
	c, pod := testContainer(t, 10*time.Second)
	ctx := shimtest.Context(t)
	p, err := c.Run(ctx, sh("sleep 30"), ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, func() { pod.kill("Evicted") })
	start := time.Now()
	_, err = p.Wait(ctx)
	var gone *PodGoneError
	if !errors.As(err, &gone) || gone.Reason != "Evicted" {
		t.Fatalf("Wait: %v, want a *PodGoneError with the pod's reason", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Wait took %v after the pod's end", d)
	}
	// A start against a pod that is gone fails instead of retrying.
	if _, err := c.Run(ctx, sh("true"), ProcessIO{}); !errors.As(err, &gone) {
		t.Fatalf("Run on a gone pod: %v", err)
	}
}
