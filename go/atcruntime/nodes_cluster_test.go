//go:build cluster && multinode

// A node lost mid-build on a cluster of three nodes (tests/cluster/tests.multi.d/20-node-lost): the
// holder keeps a task cache on the third node, a task runs there, and the third node's network is
// cut (its veth to the host down). The task's Wait fails with ReasonNodeLost naming the node within
// NodeLostAfter and a probe, and stepctl attach to the same process exits 1 naming it too; a copy
// between pods of the first and second nodes runs meanwhile undisturbed; the next container with
// the cache runs cold (the holder's volumes missing, none reported), not failed. The network comes
// back: the node takes a step again.

package atcruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/k8s"
)

func TestNodeLostMidBuild(t *testing.T) {
	e := readClusterEnv(t)
	nodes := strings.Split(os.Getenv("STEPSHIM_KIT_NODES"), ",")
	cut, heal, stepctl := os.Getenv("STEPSHIM_KIT_CUT"), os.Getenv("STEPSHIM_KIT_HEAL"), os.Getenv("STEPSHIM_KIT_STEPCTL")
	if len(nodes) < 3 || cut == "" || heal == "" || stepctl == "" {
		t.Fatal("the test needs STEPSHIM_KIT_NODES (three), STEPSHIM_KIT_CUT, STEPSHIM_KIT_HEAL and STEPSHIM_KIT_STEPCTL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	kit := connectKit(t, ctx, e)
	delivery := k8s.InitContainer(e.shimImage)
	on := func(node string) Config {
		return Config{Kit: kit, NodeLostAfter: 15 * time.Second, Volumes: VolumeConfig{
			Holder: k8s.StepSpec{Image: e.shimImage, Delivery: delivery,
				NodeSelector: map[string]string{"kubernetes.io/hostname": nodes[2]}}, Logf: t.Logf},
			Template: k8s.StepSpec{Delivery: delivery, NodeSelector: map[string]string{"kubernetes.io/hostname": node}}}
	}
	w := make([]*Worker, 3)
	for i := range w {
		var err error
		if w[i], err = NewWorker(on(nodes[i])); err != nil {
			t.Fatal(err)
		}
	}
	task := func(name string, on *Worker, inputs ...Input) (*Container, []VolumeMount) {
		c, mounts, err := on.FindOrCreateContainer(ctx, name, ContainerSpec{Type: "task", StepName: "task", JobID: 1,
			Dir: "/tmp/build/t", ImageSpec: ImageSpec{ImageURL: e.stepImage}, Caches: []string{"cache"},
			Outputs: map[string]string{"out": "out"}, Inputs: inputs}, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return c, mounts
	}
	mount := func(mounts []VolumeMount, path string) *PodVolume {
		for _, m := range mounts {
			if m.MountPath == path {
				return m.Volume.(*PodVolume)
			}
		}
		t.Fatalf("no mount at %s", path)
		return nil
	}
	// The first build keeps a task cache in the holder, on the third node.
	first, mounts := task("lost-first", w[0])
	if out := runIn(t, ctx, first, "cd /tmp/build/t && echo kept > cache/stamp && head -c 16777216 /dev/urandom > out/blob && echo ok"); out != "ok\n" {
		t.Fatalf("the first task: %q", out)
	}
	if err := mount(mounts, "/tmp/build/t/cache").InitializeTaskCache(ctx, 1, "task", "cache", 0); err != nil {
		t.Fatal(err)
	}
	// A task on the third node runs while its network is cut.
	victim, _ := task("lost-victim", w[2])
	p, err := victim.Run(ctx, ProcessSpec{ID: "long", Path: "sh", Args: []string{"-c", "echo running; sleep 600"}}, ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	attach := exec.CommandContext(ctx, stepctl, "--kubeconfig", e.kubeconfig, "-n", e.namespace, "--worker", "atc-volumes",
		"--key-file", e.keyFile, "attach", "--node-lost-after", "15", "lost-victim", "long")
	attachOut := &strings.Builder{}
	attach.Stdout, attach.Stderr = attachOut, attachOut
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if out, err := exec.Command("sh", "-c", cut).CombinedOutput(); err != nil {
		t.Fatalf("cutting the node's network: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("sh", "-c", heal).Run() })
	cutAt := time.Now()
	// Meanwhile, a copy between the other two nodes.
	copyDone := make(chan error, 1)
	go func() {
		_, _, err := w[1].FindOrCreateContainer(ctx, "lost-bystander", ContainerSpec{Type: "task", Dir: "/tmp/build/b",
			ImageSpec: ImageSpec{ImageURL: e.stepImage},
			Inputs:    []Input{{Artifact: mount(mounts, "/tmp/build/t/out"), DestinationPath: "in"}}}, nil)
		copyDone <- err
	}()
	_, err = p.Wait(ctx)
	lostAfter := time.Since(cutAt)
	var gone *PodGoneError
	if !errors.As(err, &gone) || gone.Reason != ReasonNodeLost || !strings.Contains(gone.Message, nodes[2]) {
		t.Fatalf("Wait with the node cut: %v, want %s naming %s", err, ReasonNodeLost, nodes[2])
	}
	okn("the task on %s: Wait failed %.1f s after the cut: %v", nodes[2], lostAfter.Seconds(), gone)
	if err := attach.Wait(); err == nil || !strings.Contains(attachOut.String(), "on node "+nodes[2]) {
		t.Fatalf("stepctl attach with the node cut: %v: %s", err, attachOut.String())
	}
	okn("stepctl attach: %s", lastLine(attachOut.String()))
	if err := <-copyDone; err != nil {
		t.Fatalf("the copy between %s and %s during the cut: %v", nodes[0], nodes[1], err)
	}
	okn("a 16 MiB copy from %s to %s ran during the cut", nodes[0], nodes[1])
	// The next build: the cache's holder is lost, the task runs cold.
	next, _ := task("lost-next", w[0])
	if out := runIn(t, ctx, next, "cd /tmp/build/t && cat cache/stamp 2>/dev/null || echo cold"); out != "cold\n" {
		t.Fatalf("the task after the holder's node was lost: %q, want an empty cache", out)
	}
	if handles, err := w[0].VolumeHandles(ctx); err != nil || len(handles) != 0 {
		t.Fatalf("volumes reported after the holder's node was lost: %v, %v", handles, err)
	}
	okn("the next build ran cold: the holder's volumes missing, none reported")
	// The network back, the node takes a step again.
	if out, err := exec.Command("sh", "-c", heal).CombinedOutput(); err != nil {
		t.Fatalf("restoring the node's network: %v %s", err, out)
	}
	again, _ := task("lost-again", w[2])
	if out := runIn(t, ctx, again, "echo back"); out != "back\n" {
		t.Fatalf("a step on %s after its network came back: %q", nodes[2], out)
	}
	okn("%s took a step again once its network was back", nodes[2])
}

func okn(format string, args ...any) { fmt.Printf("20-node-lost: ok: "+format+"\n", args...) }

// runIn runs script in c and returns its stdout.
func runIn(t *testing.T, ctx context.Context, c *Container, script string) string {
	t.Helper()
	var out strings.Builder
	p, err := c.Run(ctx, ProcessSpec{Path: "sh", Args: []string{"-c", script}}, ProcessIO{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitStatus != 0 {
		t.Fatalf("%q: %+v %v", script, res, err)
	}
	return out.String()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestDrainMidBuild: `kubectl drain` of the second node while a task runs there: the task's Wait
// fails at once with the eviction as its reason, `stepctl attach` says so and ends with the
// process (TERM), and no pod of the build is left on the node.
func TestDrainMidBuild(t *testing.T) {
	e := readClusterEnv(t)
	nodes := strings.Split(os.Getenv("STEPSHIM_KIT_NODES"), ",")
	stepctl, admin := os.Getenv("STEPSHIM_KIT_STEPCTL"), os.Getenv("STEPSHIM_KIT_ADMIN_KUBECONFIG")
	if len(nodes) < 3 || stepctl == "" || admin == "" {
		t.Fatal("the test needs STEPSHIM_KIT_NODES (three), STEPSHIM_KIT_STEPCTL and STEPSHIM_KIT_ADMIN_KUBECONFIG")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kit := connectKit(t, ctx, e)
	w, err := NewWorker(Config{Kit: kit, Template: k8s.StepSpec{Delivery: k8s.InitContainer(e.shimImage),
		NodeSelector: map[string]string{"kubernetes.io/hostname": nodes[1]}}})
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := w.FindOrCreateContainer(ctx, "drained", ContainerSpec{Type: "task", Dir: "/tmp/build/d",
		ImageSpec: ImageSpec{ImageURL: e.stepImage}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Run(ctx, ProcessSpec{ID: "long", Path: "sh", Args: []string{"-c", "echo running; sleep 600"}}, ProcessIO{})
	if err != nil {
		t.Fatal(err)
	}
	attach := exec.CommandContext(ctx, stepctl, "--kubeconfig", e.kubeconfig, "-n", e.namespace, "--worker", "atc-volumes",
		"--key-file", e.keyFile, "attach", "drained", "long")
	attachOut := &strings.Builder{}
	attach.Stdout, attach.Stderr = attachOut, attachOut
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	drain := exec.CommandContext(ctx, "kubectl", "--kubeconfig", admin, "drain", nodes[1], "--force",
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s")
	t.Cleanup(func() { _ = exec.Command("kubectl", "--kubeconfig", admin, "uncordon", nodes[1]).Run() })
	start := time.Now()
	if out, err := drain.CombinedOutput(); err != nil {
		t.Fatalf("kubectl drain %s: %v %s", nodes[1], err, out)
	}
	_, err = p.Wait(ctx)
	var gone *PodGoneError
	if !errors.As(err, &gone) || !strings.Contains(gone.Reason, "Eviction") {
		t.Fatalf("Wait with the node drained: %v, want the eviction as the reason", err)
	}
	okn("drain of %s: Wait failed %.1f s after the drain began: %v", nodes[1], time.Since(start).Seconds(), gone)
	_ = attach.Wait()
	if !strings.Contains(attachOut.String(), "EvictionByEvictionAPI") {
		t.Fatalf("stepctl attach with the node drained said %q, want the eviction", attachOut.String())
	}
	okn("stepctl attach: %s", lastLine(attachOut.String()))
	if err := kit.WaitGone(ctx, "drained"); err != nil {
		t.Fatalf("the drained pod is still there: %v", err)
	}
	okn("nothing of the build left on %s", nodes[1])
}
