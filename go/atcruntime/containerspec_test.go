// Tests of the ContainerSpec mapping (pod spec, image, limits, paths), of the pod's end as the
// informer's pod tells it, of user resolution against a real shim reading /etc/passwd, and of
// properties in a real shim.

package atcruntime

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

func TestStepSpecMapsATCsContainerSpec(t *testing.T) {
	cfg := &Config{
		Template:       k8s.StepSpec{Delivery: k8s.FromConfigMap("stepshim"), Env: []k8s.EnvVar{{Name: "A", Value: "template"}}},
		CertsConfigMap: "worker-certs",
	}
	cpu, mem := uint64(512), uint64(1<<30)
	spec := ContainerSpec{
		StepName: "unit", Env: []string{"B=1", "C=x=y"}, Limits: ContainerLimits{CPU: &cpu, Memory: &mem},
		Hermetic: true, CertsBindMount: true, ImageSpec: ImageSpec{Privileged: true},
	}
	s, err := stepSpec(cfg, "h-1", spec, "busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []k8s.EnvVar{{Name: "A", Value: "template"}, {Name: "B", Value: "1"}, {Name: "C", Value: "x=y"}}
	if s.Name != "h-1" || s.Image != "busybox" || s.Step != "unit" || !slices.Equal(s.Env, want) {
		t.Fatalf("spec %+v", s)
	}
	if s.CPU != "" || s.CPURequest != "500m" || s.Memory != "1073741824" {
		t.Fatalf("resources: cpu %q request %q memory %q", s.CPU, s.CPURequest, s.Memory)
	}
	if !s.Hermetic || s.CertsConfigMap != "worker-certs" || !s.Privileged {
		t.Fatalf("hermetic %v certs %q privileged %v", s.Hermetic, s.CertsConfigMap, s.Privileged)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Template.Env) != 1 {
		t.Fatal("the template's env was changed")
	}
	if _, err := stepSpec(cfg, "h-1", ContainerSpec{Env: []string{"NOVALUE"}}, "busybox", nil); err == nil {
		t.Fatal("an env entry without '=' passed")
	}
	// A run.user: the shim runs as root, so that it can run the task as that user (or as root in a
	// non-root image); no user leaves the image's; the template's ids win.
	if s.RunAsUser != nil || s.RunAsGroup != nil {
		t.Fatalf("no user: runAsUser %v runAsGroup %v, want the image's", s.RunAsUser, s.RunAsGroup)
	}
	u, err := stepSpec(cfg, "h-u", ContainerSpec{User: "1000"}, "busybox", nil)
	if err != nil || u.RunAsUser == nil || *u.RunAsUser != 0 || u.RunAsGroup == nil || *u.RunAsGroup != 0 {
		t.Fatalf("a run.user: runAsUser %v runAsGroup %v (%v), want 0 and 0", u.RunAsUser, u.RunAsGroup, err)
	}
	mine := int64(4242)
	cfg.Template.RunAsUser = &mine
	if u, _ := stepSpec(cfg, "h-u", ContainerSpec{User: "1000"}, "busybox", nil); *u.RunAsUser != 4242 || u.RunAsGroup != nil {
		t.Fatalf("the template's runAsUser was overridden: %v %v", *u.RunAsUser, u.RunAsGroup)
	}
	cfg.Template.RunAsUser = nil
	zero := uint64(0)
	cfg.Template.CPU, cfg.Template.Memory = "1", "1Gi"
	z, err := stepSpec(cfg, "h-0", ContainerSpec{Limits: ContainerLimits{CPU: &zero, Memory: &zero}}, "busybox", nil)
	if err != nil || z.CPU != "1" || z.CPURequest != "" || z.Memory != "1Gi" {
		t.Fatalf("zero limits, Garden's default: cpu %q request %q memory %q (%v), want the template's",
			z.CPU, z.CPURequest, z.Memory, err)
	}
	for shares, want := range map[uint64]string{1024: "1000m", 2048: "2000m", 1: "1m", 100: "97m"} {
		if got := cpuRequest(shares); got != want {
			t.Errorf("cpuRequest(%d) = %q, want %q", shares, got, want)
		}
	}
}

func TestImageRef(t *testing.T) {
	cfg := &Config{ResourceTypes: map[string]string{"git": "registry.local/git-resource:1"}}
	for _, tc := range []struct {
		spec ImageSpec
		want string
	}{
		{ImageSpec{ImageURL: "busybox:1.36"}, "busybox:1.36"},
		{ImageSpec{ImageURL: "docker:///busybox#1.36"}, "busybox:1.36"},
		{ImageSpec{ImageURL: "docker:///registry.local/x/y"}, "registry.local/x/y"},
		{ImageSpec{ResourceType: "git"}, "registry.local/git-resource:1"},
	} {
		got, err := imageRef(cfg, tc.spec)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q %v, want %q", tc.spec, got, err, tc.want)
		}
	}
	if _, err := imageRef(cfg, ImageSpec{ImageURL: "raw:///var/rootfs"}); err == nil ||
		!strings.Contains(err.Error(), "Config.ResourceTypes") {
		t.Errorf("raw://: %v, want what to do instead", err)
	}
	for _, bad := range []ImageSpec{{}, {ImageURL: "raw:///var/rootfs"}, {ImageURL: "docker:///"},
		{ResourceType: "hg"}, {ImageURL: "a", ResourceType: "git"}} {
		if _, err := imageRef(cfg, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestMountPaths(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec ContainerSpec
		want []string
	}{
		{"a task: scratch, the working directory, then the rest by path", ContainerSpec{
			Dir:     "/tmp/build/x",
			Inputs:  []Input{{DestinationPath: "src"}, {DestinationPath: "/abs/in/"}},
			Caches:  []string{"cache"},
			Outputs: map[string]string{"z": "out-z", "a": "/tmp/build/x/out-a"},
		}, []string{"/scratch", "/tmp/build/x", "/abs/in", "/tmp/build/x/cache", "/tmp/build/x/out-a",
			"/tmp/build/x/out-z", "/tmp/build/x/src"}},
		// ATC's get step names only Dir and reads its result from the volume mounted there.
		{"a get", ContainerSpec{Dir: "/tmp/build/get"}, []string{"/scratch", "/tmp/build/get"}},
		{"a check", ContainerSpec{}, []string{"/scratch"}},
		{"an output at an input's path is that input; Dir taken by an output", ContainerSpec{
			Dir:     "/tmp/build/put/",
			Inputs:  []Input{{DestinationPath: "repo"}},
			Outputs: map[string]string{"repo": "repo/", "all": "."},
		}, []string{"/scratch", "/tmp/build/put", "/tmp/build/put/repo"}},
	} {
		p, err := mountPaths(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(p.all, tc.want) {
			t.Errorf("%s: paths %q, want %q", tc.name, p.all, tc.want)
		}
	}
	if _, err := mountPaths(ContainerSpec{Caches: []string{"rel"}}); err == nil {
		t.Fatal("a relative path without Dir passed")
	}
}

func TestPodGone(t *testing.T) {
	now := metav1.Now()
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"}, Status: corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "step", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	}}
	if g := podGone(running, "p", "u1"); g != nil {
		t.Fatalf("a running pod is gone: %v", g)
	}
	notReady := running.DeepCopy()
	notReady.Status.Conditions[1].Status = corev1.ConditionFalse
	if g := podGone(notReady, "p", "u1"); g != nil {
		t.Fatalf("a pod failing its readiness probe is gone: %v", g)
	}
	evicting := running.DeepCopy()
	evicting.DeletionTimestamp = &now
	evicting.Status.Conditions = append(evicting.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "drained"})
	evicted := running.DeepCopy()
	evicted.Status.Phase, evicted.Status.Reason, evicted.Status.Message = corev1.PodFailed, "Evicted", "low on memory"
	deleting := running.DeepCopy()
	deleting.DeletionTimestamp = &now
	for _, tc := range []struct {
		pod    *corev1.Pod
		uid    string
		reason string
	}{
		{nil, "u1", "Deleted"},
		{running, "u2", "Replaced"},
		{deleting, "u1", "Deleted"},
		{evicting, "u1", "EvictionByEvictionAPI"},
		{evicted, "u1", "Evicted"},
	} {
		g := podGone(tc.pod, "p", types.UID(tc.uid))
		if g == nil || g.Reason != tc.reason || g.Pod != "p" {
			t.Errorf("want reason %q, got %v", tc.reason, g)
		}
	}
}

func TestResolveOwnerReadsTheImagesUsers(t *testing.T) {
	c := runShim(t)
	ctx := shimtest.Context(t)
	for user, want := range map[string]shim.Owner{
		"root": {UID: 0, GID: 0}, "0": {UID: 0, GID: 0}, "1234": {UID: 1234, GID: 1234},
		"1234:77": {UID: 1234, GID: 77}, "root:5": {UID: 0, GID: 5}, "0:root": {UID: 0, GID: 0},
	} {
		got, err := resolveOwner(ctx, c, user)
		if err != nil || got == nil || *got != want {
			t.Errorf("%q: %+v %v, want %+v", user, got, err, want)
		}
	}
	if got, err := resolveOwner(ctx, c, ""); got != nil || err != nil {
		t.Errorf("empty user: %+v %v", got, err)
	}
	for _, bad := range []string{"no-such-user-here", "root:no-such-group"} {
		var unknown *UnknownUserError
		if _, err := resolveOwner(ctx, c, bad); !errors.As(err, &unknown) || !strings.Contains(err.Error(), "no-such") {
			t.Errorf("%q: err %v, want an *UnknownUserError", bad, err)
		}
	}
	passwd := []string{"# comment", "builder:x:1001:1002::/home/builder:/bin/sh", "broken:x:a:b"}
	if u, g, ok := lookupPasswd(passwd, "builder", false, 0); !ok || u != 1001 || g != 1002 {
		t.Errorf("builder: %d %d %v", u, g, ok)
	}
	if u, g, ok := lookupPasswd(passwd, "", true, 1001); !ok || u != 1001 || g != 1002 {
		t.Errorf("uid 1001: %d %d %v", u, g, ok)
	}
}

func TestPropertiesInTheShim(t *testing.T) {
	c, _ := testContainer(t, time.Second)
	if err := c.SetProperty("concourse:exit-status", "0"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetProperty(PropertyUser, "builder"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetProperty(PropertyReady, "1"); err != nil {
		t.Fatal(err)
	}
	// ATC's and nothing of the package's own.
	props, err := c.Properties()
	if err != nil || props["concourse:exit-status"] != "0" || props[PropertyUser] != "builder" || len(props) != 2 {
		t.Fatalf("properties %v %v", props, err)
	}
	// An error that no retry can mend is answered at once.
	c.cfg.RequestTimeout = 5 * time.Second
	start := time.Now()
	if err := c.SetProperty("a/b", "x"); !errors.Is(err, shim.ErrInvalidPropertyName) || time.Since(start) > time.Second {
		t.Fatalf("an invalid name: %v after %v", err, time.Since(start))
	}
	// Bounded without a ctx: a shim that does not answer is an error after RequestTimeout.
	c.cfg.RequestTimeout = 300 * time.Millisecond
	// A listener that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	stuck, err := shim.New("http://"+ln.Addr().String(), "t")
	if err != nil {
		t.Fatal(err)
	}
	c.client = stuck
	start = time.Now()
	_, err = c.Properties()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Properties against a shim that does not answer: %v after %v", err, time.Since(start))
	}
}
