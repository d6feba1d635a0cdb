// GCContainers and Info against a fake apiserver: the pods not desired go, the holder pod stays;
// Info counts the step pods but not the holder.

package atcruntime

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"stepshim.dev/go/k8s"
)

func TestGCContainersKeepsTheHolder(t *testing.T) {
	ctx := context.Background()
	key, err := k8s.NewKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	kit, err := k8s.NewWorker(ctx, cs, k8s.Config{Namespace: "steps", Worker: "w", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer kit.Close()
	w, err := NewWorker(Config{Kit: kit, Template: k8s.StepSpec{Delivery: k8s.FromConfigMap("c")}})
	if err != nil {
		t.Fatal(err)
	}
	old := metav1.NewTime(time.Now().Add(-time.Hour))
	for _, name := range []string{"task", "check", w.HolderPod()} {
		p, err := k8s.StepPod(k8s.StepSpec{Name: name, Image: "i", Delivery: k8s.FromConfigMap("c")}, "w",
			k8s.AuthOf(kit.Token(name), false))
		if err != nil {
			t.Fatal(err)
		}
		p.Namespace, p.CreationTimestamp = "steps", old
		if _, err := cs.CoreV1().Pods("steps").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(kit.List()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the informer saw %d pods, want 3", len(kit.List()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Info counts the step pods, the holder aside; a holder that does not serve holds no volume.
	w.cfg.ResourceTypes = map[string]string{"git": "git-resource:1", "time": "time-resource:2"}
	w.cfg.ResourceTypeInfo = map[string]ResourceTypeInfo{"git": {Version: "1.17", Privileged: true}}
	w.cfg.Tags, w.cfg.Team = []string{"k8s"}, "main"
	info, err := w.Info(ctx)
	want := []WorkerResourceType{{Type: "git", Image: "git-resource:1", Version: "1.17", Privileged: true},
		{Type: "time", Image: "time-resource:2"}}
	if err != nil || info.Name != "w" || info.Platform != "linux" || info.Team != "main" ||
		!slices.Equal(info.Tags, []string{"k8s"}) || !slices.Equal(info.ResourceTypes, want) ||
		info.ActiveContainers != 2 || info.ActiveVolumes != 0 {
		t.Fatalf("info %+v %v", info, err)
	}
	deleted, err := w.GCContainers(ctx, []string{"task"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{"check"}) {
		t.Fatalf("deleted %v, want only check (the holder %s kept)", deleted, w.HolderPod())
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if info, err := w.Info(ctx); err == nil && info.ActiveContainers == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after GC: info %+v %v, want 1 active container", info, err)
		}
	}
}
