// What a build must survive, the atc way only (an exec runtime has no answer to the first three):
// an abort mid-task (the process gets TERM, the build sees its exit, no process is left), the web
// node restarted mid-task (a new Worker re-attaches as ATC does, and the kit continues where the
// old one's log ended: every line once), the task's pod evicted (Wait fails at once with the pod's
// reason), and a task whose user is not root writing its output and into the task cache the root
// runs kept.

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stepshim.dev/go/atcruntime"
	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

// abortScript says when it started and when it got TERM, and otherwise runs until stopped.
const abortScript = `trap 'echo got TERM; exit 143' TERM
echo started
while :; do sleep 0.2; done`

// linesScript writes $1 numbered lines, one every 20 ms.
const linesScript = `i=1; while [ "$i" -le "$1" ]; do echo "line $i"; i=$((i + 1)); sleep 0.02; done`

// fault is a check of what a build must survive.
type fault struct {
	name string
	run  func(context.Context) error
}

// Faults runs the checks after the builds, each a phase of r: these four, then the volumes'
// (volumes.go).
func (a *atcWay) Faults(ctx context.Context, r *Result) error {
	checks := append([]fault{
		{"abort mid-task", a.abort},
		{"web node restarted mid-task", a.restart},
		{"task pod evicted mid-task", a.evicted},
		{"task as a non-root user", a.nonRoot},
	}, a.volumeChecks()...)
	for _, f := range checks {
		t := time.Now()
		if err := f.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		r.add(f.name, stepTime{Run: time.Since(t)})
		r.Phases[len(r.Phases)-1].Fault = true
	}
	return nil
}

func (a *atcWay) taskContainer(ctx context.Context, step, user string) (*atcruntime.Container, error) {
	c, _, err := a.container(ctx, step, atcruntime.ContainerSpec{Type: "task", StepName: step, Dir: taskDir,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage}, User: user,
		Outputs: map[string]string{"out": "out"}})
	return c, err
}

// untilLine is a writer that signals once its output holds line.
type untilLine struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	line string
	seen chan struct{}
	once sync.Once
}

func newUntilLine(line string) *untilLine {
	return &untilLine{line: line + "\n", seen: make(chan struct{})}
}

func (u *untilLine) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.buf.Write(p)
	if strings.Contains(u.buf.String(), u.line) {
		u.once.Do(func() { close(u.seen) })
	}
	return len(p), nil
}

func (u *untilLine) String() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.buf.String()
}

// startRunning starts abortScript in a new task container of step and waits until it has started.
func (a *atcWay) startRunning(ctx context.Context, step string) (*atcruntime.Container, *atcruntime.PodProcess, *untilLine, error) {
	c, err := a.taskContainer(ctx, step, "")
	if err != nil {
		return nil, nil, nil, err
	}
	out := newUntilLine("started")
	p, err := c.Run(ctx, atcruntime.ProcessSpec{Path: "/bin/sh", Args: []string{"-c", abortScript}},
		atcruntime.ProcessIO{Stdout: out})
	if err != nil {
		return nil, nil, nil, err
	}
	return c, p, out, waitSeen(ctx, out.seen, "started")
}

// abort: the build is aborted while its task runs (ATC cancels Wait's ctx): the process gets TERM,
// Wait answers the cancellation once the process has exited, and the shim keeps no process.
func (a *atcWay) abort(ctx context.Context) error {
	c, p, out, err := a.startRunning(ctx, "abort")
	if err != nil {
		return err
	}
	aborted, abort := context.WithCancel(ctx)
	abort()
	if _, err := p.Wait(aborted); !errors.Is(err, context.Canceled) {
		return fmt.Errorf("Wait after the abort answered %v, want the cancellation", err)
	}
	if !strings.Contains(out.String(), "got TERM\n") {
		return fmt.Errorf("the task never said it got TERM: %q", out.String())
	}
	if _, _, err := c.Status(ctx, p.ID()); !shim.IsNotFound(err) {
		return fmt.Errorf("the aborted process is still known to the shim (%v)", err)
	}
	return nil
}

func waitSeen(ctx context.Context, seen <-chan struct{}, what string) error {
	select {
	case <-seen:
		return nil
	case <-time.After(60 * time.Second):
		return fmt.Errorf("no %q within 60 s", what)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stallAfter is the web node that dies once its log holds line: the writes up to it are kept, every
// later one blocks until release and is then dropped, so the Process's offset stays where the kept
// log ends.
type stallAfter struct {
	*untilLine
	release chan struct{}
}

func (s *stallAfter) Write(p []byte) (int, error) {
	select {
	case <-s.seen:
		<-s.release
		return len(p), nil
	default:
		return s.untilLine.Write(p)
	}
}

// restart: the task's output is followed by one web node up to line 10; that node goes, another
// (a new Worker on a new informer, from the same key) finds the container by its handle and, as
// ATC's task step does, attaches with no offset: the kit continues where the first node's log
// ended, so the log, both halves, holds every line once. A third node attaching after the exit
// gets the exit status and no output.
func (a *atcWay) restart(ctx context.Context) error {
	c, err := a.taskContainer(ctx, "restart", "")
	if err != nil {
		return err
	}
	old := &stallAfter{untilLine: newUntilLine("line 10"), release: make(chan struct{})}
	defer close(old.release)
	p, err := c.Run(ctx, atcruntime.ProcessSpec{ID: "task", Path: "/bin/sh", Args: []string{"-c", linesScript, "sh", "40"}},
		atcruntime.ProcessIO{Stdout: old})
	if err != nil {
		return err
	}
	if err := waitSeen(ctx, old.seen, "line 10"); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // the frame after line 10 is then blocked in Write
	kept := old.String()
	// What the node wrote reaches the shim's record within Config.DeliveredInterval (100 ms).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := c.Delivered("task")
		if err == nil && n == p.Offset() {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the shim's record of the delivered output is %d, not %d (%v)", n, p.Offset(), err)
		}
	}
	var rest bytes.Buffer
	if err := a.attachFromNewNode(ctx, c.Handle(), &rest, 0); err != nil {
		return err
	}
	var all strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&all, "line %d\n", i)
	}
	if got := kept + rest.String(); got != all.String() {
		return fmt.Errorf("the log across the restart is not every line once: kept %q, then %q", kept, rest.String())
	}
	var after bytes.Buffer
	if err := a.attachFromNewNode(ctx, c.Handle(), &after, 0); err != nil {
		return err
	}
	if after.Len() != 0 {
		return fmt.Errorf("a web node attaching after the exit wrote %q again", after.String())
	}
	return nil
}

// attachFromNewNode is a new web node (a Worker on a new informer, from the same key) finding the
// container by its handle and attaching to its task as ATC does, with no offset, the task's output
// going to log; the task must end with status.
func (a *atcWay) attachFromNewNode(ctx context.Context, handle string, log *bytes.Buffer, status int) error {
	kit, err := k8s.NewWorker(ctx, a.cs, a.kitConfig)
	if err != nil {
		return err
	}
	defer kit.Close()
	cfg := a.config
	cfg.Kit = kit
	w, err := atcruntime.NewWorker(cfg)
	if err != nil {
		return err
	}
	c, found, err := w.LookupContainer(ctx, handle)
	if err != nil || !found {
		return fmt.Errorf("the new web node did not find %s (%v)", handle, err)
	}
	p, err := c.Attach(ctx, "task", atcruntime.ProcessIO{Stdout: log})
	if err != nil {
		return err
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitStatus != status {
		return fmt.Errorf("the re-attached task ended with %+v, %v", res, err)
	}
	return nil
}

// evicted: the task's pod is evicted (the Eviction API, as a drain does) while ATC waits on its
// process: Wait fails at once with the pod's reason.
func (a *atcWay) evicted(ctx context.Context) error {
	c, p, _, err := a.startRunning(ctx, "evict")
	if err != nil {
		return err
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: c.Handle(), Namespace: a.kit.Namespace()}}
	t := time.Now()
	if err := a.evictor.PolicyV1().Evictions(a.kit.Namespace()).Evict(ctx, ev); err != nil {
		return fmt.Errorf("evicting %s: %w", c.Handle(), err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	_, err = p.Wait(waitCtx)
	var gone *atcruntime.PodGoneError
	if !errors.As(err, &gone) {
		return fmt.Errorf("Wait after the eviction answered %v, want the pod's end", err)
	}
	a.logf("eviction: Wait failed %.2f s after the eviction: %v", time.Since(t).Seconds(), gone)
	return nil
}

// nonRoot: a task whose user is nobody writes its output, and into the task cache the builds' root
// runs kept (restored owned by the task's user): the output and the cache are its own.
func (a *atcWay) nonRoot(ctx context.Context) error {
	c, _, err := a.container(ctx, "nonroot", atcruntime.ContainerSpec{Type: "task", StepName: "task", Dir: taskDir,
		ImageSpec: atcruntime.ImageSpec{ImageURL: a.stepImage}, User: "nobody",
		Caches: []string{"cache"}, Outputs: map[string]string{"out": "out"}})
	if err != nil {
		return err
	}
	out, err := runScript(ctx, c, `set -e; cd "$1"; test -f cache/stamp || { echo "no cache restored" >&2; exit 1; }
id -u; echo written > out/file; echo "by nobody" > cache/stamp; stat -c %u out/file cache/stamp cache`, taskDir)
	if err != nil {
		return err
	}
	if got := strings.Fields(out); len(got) != 4 || got[0] == "0" || got[0] != got[1] || got[0] != got[2] || got[0] != got[3] {
		return fmt.Errorf("want the task's uid (not 0) four times (itself, its output, its cache's file and "+
			"directory), printed %q", out)
	}
	return nil
}
