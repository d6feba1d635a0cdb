// Unit tests of the pure parts: label values, keys, spec validation and the GC rule.

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLabelValuesAreValid(t *testing.T) {
	for in, want := range map[string]string{
		"--a b--":                "a_b",
		"#":                      "",
		"main/build #42":         "main_build__42",
		"é-x":                    "x",
		strings.Repeat("x", 100): strings.Repeat("x", 63),
		strings.Repeat("é", 70):  "",
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeysAreLongAndSecretAndTokensPerPod(t *testing.T) {
	if _, err := NewKey(make([]byte, 31)); err == nil {
		t.Error("a 31-byte key was accepted")
	}
	k, err := NewKey(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%v %#v %s", k, k, k) != "Key(<secret>) Key(<secret>) Key(<secret>)" {
		t.Error("the key's bytes can be printed")
	}
	a := k.Token("ns", "pod-a")
	if a != k.Token("ns", "pod-a") || a == k.Token("ns", "pod-b") || a == k.Token("ns2", "pod-a") || len(a) != 64 {
		t.Errorf("tokens are not stable and per pod: %s", a)
	}
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := KeyFromFile(path); err == nil || !strings.Contains(err.Error(), "6 bytes") {
		t.Errorf("a short key file: %v", err)
	}
}

func TestValidateRefusesWhatWouldNotMakeAPod(t *testing.T) {
	ok := StepSpec{Name: "s", Image: "i", Delivery: InitContainer("shim")}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]StepSpec{
		"name":     {Image: "i", Delivery: InitContainer("shim")},
		"image":    {Name: "s", Delivery: InitContainer("shim")},
		"delivery": {Name: "s", Image: "i"},
		"cpu":      {Name: "s", Image: "i", Delivery: FromConfigMap("c"), CPU: "lots"},
		"memory":   {Name: "s", Image: "i", Delivery: FromConfigMap("c"), Memory: "1 GB"},
	} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(what, "name")) {
			t.Errorf("%s: %v", what, err)
		}
	}
}

func TestGCCollectsOnlyOldUndesiredPodsNotAlreadyGoing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	pod := func(name, created string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if created != "" {
			c, _ := time.Parse(time.RFC3339, created)
			p.CreationTimestamp = metav1.NewTime(c)
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("kept", "2026-01-01T00:00:00Z", false),
		pod("old", "2026-01-01T00:00:00Z", false),
		pod("young", "2026-01-01T00:09:30Z", false),
		pod("going", "2026-01-01T00:00:00Z", true),
		pod("edge", "2026-01-01T00:09:00Z", false),
		pod("future", "2026-01-01T00:20:00Z", false),
		pod("untimed", "", false),
	}
	got := SelectGarbage(pods, map[string]bool{"kept": true}, time.Minute, now)
	if !slices.Equal(got, []string{"old", "edge"}) {
		t.Errorf("gc with a minute's grace chose %v", got)
	}
	got = SelectGarbage(pods, nil, 0, now)
	if !slices.Equal(got, []string{"kept", "old", "young", "edge", "future", "untimed"}) {
		t.Errorf("retire chose %v", got)
	}
}
