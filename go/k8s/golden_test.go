// The golden files shared with the Rust controller (protocol/testdata, see its README): the pod StepPod
// builds for each case (and HermeticPolicy for a hermetic one), the token of token.json and the verdicts of progress.json, compared field by
// field with the differing paths named. controller/tests/golden.rs checks the same files.

package k8s

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func testdata(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "protocol", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, ok := into.(*any); !ok {
		// A field added to a case for one side fails here until this side knows it.
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// diff appends every path where got differs from want, with both values.
func diff(path string, want, got any, out *[]string) {
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	w, wok := want.(map[string]any)
	g, gok := got.(map[string]any)
	if wok && gok {
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if gv, ok := g[k]; ok {
				diff(at(k), w[k], gv, out)
			} else {
				*out = append(*out, fmt.Sprintf("%s: want %s, missing", at(k), js(w[k])))
			}
		}
		for k, gv := range g {
			if _, ok := w[k]; !ok {
				*out = append(*out, fmt.Sprintf("%s: not wanted, got %s", at(k), js(gv)))
			}
		}
		return
	}
	wa, wok := want.([]any)
	ga, gok := got.([]any)
	if wok && gok && len(wa) == len(ga) {
		for i := range wa {
			diff(fmt.Sprintf("%s[%d]", path, i), wa[i], ga[i], out)
		}
		return
	}
	if !reflect.DeepEqual(want, got) {
		*out = append(*out, fmt.Sprintf("%s: want %s, got %s", path, js(want), js(got)))
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// asJSON is v marshalled and parsed back into maps, slices and float64s, as the golden files parse.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The two encoders differ where a field is empty, and the apiserver (which decodes into these Go
// types) reads both forms as the same pod. Go writes empty objects for non-pointer struct fields that
// the Rust side (Option fields) leaves out: the pod's status and a container's resources. Go leaves
// out empty maps and strings (omitempty) that the Rust side writes: the annotations of a pod without
// build or step, an env var's empty value. These and only these are dropped before comparing, so an
// emptyDir: {} or a securityContext: {} still has to be there.
func dropEmpties(pod any) {
	empty := func(m map[string]any, k string) {
		switch v := m[k].(type) {
		case map[string]any:
			if len(v) == 0 {
				delete(m, k)
			}
		case string:
			if v == "" {
				delete(m, k)
			}
		}
	}
	p, _ := pod.(map[string]any)
	empty(p, "status")
	meta, _ := p["metadata"].(map[string]any)
	empty(meta, "annotations")
	spec, _ := p["spec"].(map[string]any)
	for _, list := range []string{"containers", "initContainers"} {
		cs, _ := spec[list].([]any)
		for _, c := range cs {
			c, _ := c.(map[string]any)
			empty(c, "resources")
			env, _ := c["env"].([]any)
			for _, e := range env {
				e, _ := e.(map[string]any)
				empty(e, "value")
			}
		}
	}
}

type caseSpec struct {
	Name                         string              `json:"name"`
	Image                        string              `json:"image"`
	Build                        string              `json:"build"`
	Step                         string              `json:"step"`
	Env                          []EnvVar            `json:"env"`
	CPU                          string              `json:"cpu"`
	CPURequest                   string              `json:"cpuRequest"`
	Memory                       string              `json:"memory"`
	Hermetic                     bool                `json:"hermetic"`
	CertsConfigMap               string              `json:"certsConfigMap"`
	RunAsUser                    *int64              `json:"runAsUser"`
	RunAsGroup                   *int64              `json:"runAsGroup"`
	Privileged                   bool                `json:"privileged"`
	NodeSelector                 map[string]string   `json:"nodeSelector"`
	Tolerations                  []corev1.Toleration `json:"tolerations"`
	PreferredNodes               []string            `json:"preferredNodes"`
	ServiceAccount               string              `json:"serviceAccount"`
	AutomountServiceAccountToken bool                `json:"automountServiceAccountToken"`
	ImagePullPolicy              corev1.PullPolicy   `json:"imagePullPolicy"`
	Delivery                     struct {
		InitContainer string `json:"initContainer"`
		ConfigMap     string `json:"configMap"`
	} `json:"delivery"`
}

// spec is the case's StepSpec, serving TLS iff the case gives a seed.
func (c caseSpec) spec(t *testing.T, tls bool) StepSpec {
	s := StepSpec{
		Name: c.Name, Image: c.Image, Build: c.Build, Step: c.Step, Env: c.Env, CPU: c.CPU,
		Memory: c.Memory, RunAsUser: c.RunAsUser, RunAsGroup: c.RunAsGroup, Privileged: c.Privileged,
		NodeSelector: c.NodeSelector, Tolerations: c.Tolerations, PreferredNodes: c.PreferredNodes,
		ServiceAccount:               c.ServiceAccount,
		AutomountServiceAccountToken: c.AutomountServiceAccountToken, ImagePullPolicy: c.ImagePullPolicy,
		CPURequest: c.CPURequest, Hermetic: c.Hermetic, CertsConfigMap: c.CertsConfigMap,
	}
	if c.Delivery.ConfigMap != "" {
		s.Delivery = FromConfigMap(c.Delivery.ConfigMap)
	} else {
		s.Delivery = InitContainer(c.Delivery.InitContainer)
	}
	mode := TLSOff
	if tls {
		mode = TLSOn
	}
	var err error
	if s.Delivery, err = s.Delivery.WithTLS(mode); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStepPodsMatchTheGoldenFiles(t *testing.T) {
	var cases struct {
		Cases []struct {
			Name        string   `json:"name"`
			Worker      string   `json:"worker"`
			TokenSHA256 string   `json:"tokenSha256"`
			TLSSeed     string   `json:"tlsSeed"`
			Spec        caseSpec `json:"spec"`
		} `json:"cases"`
	}
	testdata(t, "steppod-cases.json", &cases)
	deliveries := map[string]bool{}
	hermetic := 0
	for _, c := range cases.Cases {
		t.Run(c.Name, func(t *testing.T) {
			spec := c.Spec.spec(t, c.TLSSeed != "")
			if err := spec.Validate(); err != nil {
				t.Fatal(err)
			}
			deliveries[fmt.Sprintf("%s, TLS %v", spec.Delivery.String()[:4], spec.Delivery.TLS())] = true
			got := asJSON(t, mustStepPod(t, spec, c.Worker, PodAuth{TokenSHA256: c.TokenSHA256, TLSSeed: c.TLSSeed}))
			var want any
			testdata(t, "steppod-"+c.Name+".json", &want)
			dropEmpties(got)
			dropEmpties(want)
			var out []string
			diff("", want, got, &out)
			for _, d := range out {
				t.Errorf("steppod-%s.json: %s", c.Name, d)
			}
			if !spec.Hermetic {
				return
			}
			hermetic++
			file := "hermetic-policy-" + c.Name + ".json"
			var policy any
			testdata(t, file, &policy)
			out = nil
			diff("", policy, asJSON(t, HermeticPolicy(c.Worker, spec.Name)), &out)
			for _, d := range out {
				t.Errorf("%s: %s", file, d)
			}
		})
	}
	if hermetic == 0 {
		t.Error("no case is hermetic")
	}
	if len(deliveries) != 3 {
		t.Errorf("the cases cover %v, want both deliveries and the init container with and without TLS", deliveries)
	}
}

func TestTokenMatchesTheGoldenFile(t *testing.T) {
	var g struct {
		KeyHex      string `json:"keyHex"`
		Namespace   string `json:"namespace"`
		Pod         string `json:"pod"`
		Token       string `json:"token"`
		TokenSHA256 string `json:"tokenSha256"`
	}
	testdata(t, "token.json", &g)
	b, err := hex.DecodeString(g.KeyHex)
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKey(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Token(g.Namespace, g.Pod); got != g.Token {
		t.Errorf("token of %s/%s: got %s, want %s", g.Namespace, g.Pod, got, g.Token)
	}
	if got := TokenSHA256(g.Token); got != g.TokenSHA256 {
		t.Errorf("token hash: got %s, want %s", got, g.TokenSHA256)
	}
}

func TestProgressReadsStatusesAsTheTableSays(t *testing.T) {
	var table struct {
		Cases []struct {
			Name   string          `json:"name"`
			Status json.RawMessage `json:"status"`
			Want   struct {
				Stage  Stage  `json:"stage"`
				Reason string `json:"reason"`
				Detail string `json:"detail"`
			} `json:"want"`
			Text string `json:"text"`
		} `json:"cases"`
	}
	testdata(t, "progress.json", &table)
	for _, c := range table.Cases {
		pod := &corev1.Pod{}
		if len(c.Status) > 0 && string(c.Status) != "null" {
			if err := json.Unmarshal(c.Status, &pod.Status); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
		}
		got := ProgressOf(pod)
		want := Progress{Stage: c.Want.Stage, Reason: c.Want.Reason, Detail: c.Want.Detail}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", c.Name, got, want)
		}
		if c.Text != "" && got.String() != c.Text {
			t.Errorf("%s: text %q, want %q", c.Name, got.String(), c.Text)
		}
	}
	if p := ProgressOf(nil); p.Stage != Unknown || p.String() != "creating" {
		t.Errorf("nil pod: %+v", p)
	}
}
