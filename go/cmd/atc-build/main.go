// Command atc-build runs two Concourse-shaped builds of one job on a cluster two ways in one run and
// times each phase (scenario.go): build 1 a check container reused for N checks, a get of a source
// tree and a get of a rootfs/ + metadata.json image (each kept as a resource cache), a task run twice
// in that image with the source as input, a cache and an output (the second run must find the
// first's cache), and a put reading the task's output; build 2 the gets from their resource caches,
// the task once more and the put. It counts the bytes through this process for each way (count.go).
//
//	exec  as an exec-based Kubernetes runtime does it: sleep pods, every process a pods/exec through
//	      the apiserver, artifacts as tar streams through this process (execway.go);
//	atc   through the package atcruntime only, as ATC would (atcway.go).
//
// Each way runs in a namespace of its own with credentials of its own: the exec way's may create
// pods/exec, the atc way's only what `stepctl manifests --forwarder` grants. It prints a Markdown
// table of the phases and the bytes side by side, writes the same as JSON with -json, and exits 1 when any step of
// any way failed or printed what it should not have.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type options struct {
	execKubeconfig, execNamespace           string
	kubeconfig, namespace, keyFile, tlsMode string
	stepImage, shimImage, shimConfigMap     string
	evictKubeconfig                         string
	ways, jsonPath, markdownPath            string
	ignoreLocality, placement               bool
	build                                   Build
	timeout                                 time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.execKubeconfig, "exec-kubeconfig", "", "kubeconfig of the exec way (pods and pods/exec)")
	flag.StringVar(&o.execNamespace, "exec-namespace", "", "namespace of the exec way's pods")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the atc way's worker (stepctl manifests' RBAC)")
	flag.StringVar(&o.namespace, "namespace", "", "namespace of the atc way's step pods")
	flag.StringVar(&o.keyFile, "key", "", "file holding the atc way's worker key")
	flag.StringVar(&o.tlsMode, "tls", "", "the atc way's shim TLS: empty (on) or off")
	flag.StringVar(&o.stepImage, "step-image", "stepshim.local/step:dev", "the steps' image")
	flag.StringVar(&o.shimImage, "shim-image", "stepshim.local/stepshim:dev", "the shim's image (atc way)")
	flag.StringVar(&o.shimConfigMap, "shim-configmap", "", "deliver the atc way's shim from this ConfigMap "+
		"(plain HTTP) instead of by an init container from -shim-image (TLS)")
	flag.StringVar(&o.ways, "ways", "exec,atc", "the ways to run, in order: exec, atc")
	flag.IntVar(&o.build.Checks, "checks", 100, "checks run in the check container")
	flag.IntVar(&o.build.Files, "files", 200, "files of the get's source tree")
	flag.BoolVar(&o.build.Faults, "faults", false, "after the build, the atc way's faults: an abort, a web node "+
		"restarted, a pod evicted mid-task, a non-root task (needs -evict-kubeconfig)")
	flag.StringVar(&o.evictKubeconfig, "evict-kubeconfig", "", "kubeconfig allowed to evict the atc way's pods "+
		"(pods/eviction), for -faults")
	flag.BoolVar(&o.ignoreLocality, "ignore-locality", false, "the atc way places containers where the "+
		"scheduler alone decides, not near their inputs, image and caches")
	flag.BoolVar(&o.placement, "placement", false, "log the node of each container of the atc way")
	flag.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file")
	flag.StringVar(&o.markdownPath, "markdown", "", "write the table to this file too")
	flag.DurationVar(&o.timeout, "timeout", 8*time.Minute, "bound of each way's build")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "atc-build:", err)
		os.Exit(1)
	}
}

func (o *options) validate() error {
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	if o.build.Checks < 1 || o.build.Files < 1 {
		return errors.New("-checks and -files must be at least 1")
	}
	if o.build.Faults && o.evictKubeconfig == "" {
		return errors.New("-faults needs -evict-kubeconfig (the evicting party's credentials)")
	}
	for _, w := range strings.Split(o.ways, ",") {
		switch {
		case w == "exec" && (o.execKubeconfig == "" || o.execNamespace == ""):
			return errors.New("the exec way needs -exec-kubeconfig and -exec-namespace")
		case w == "atc" && (o.kubeconfig == "" || o.namespace == "" || o.keyFile == ""):
			return errors.New("the atc way needs -kubeconfig, -namespace and -key")
		case w != "exec" && w != "atc":
			return fmt.Errorf("unknown way %q in -ways (exec, atc)", w)
		}
	}
	return nil
}

// delivery says how the atc way's pods get their shim.
func (o *options) delivery() string {
	switch {
	case o.shimConfigMap != "":
		return "ConfigMap " + o.shimConfigMap + ", plain HTTP"
	case o.tlsMode == "off":
		return "init container from " + o.shimImage + ", plain HTTP"
	}
	return "init container from " + o.shimImage + ", TLS"
}

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	prefix := "b" + randomHex(3) + "-"
	var report Report
	for i, name := range strings.Split(o.ways, ",") {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		w, version, err := newWay(ctx, o, name, prefix)
		if err != nil {
			cancel()
			return fmt.Errorf("%s way: %w", name, err)
		}
		if i == 0 {
			report.Context = newContext(o.build, version)
			report.Context.Delivery = o.delivery()
		}
		res := runBuild(ctx, w, o.build)
		cancel()
		if c, ok := w.(interface{ Close() }); ok {
			c.Close()
		}
		report.Ways = append(report.Ways, res)
	}
	report.Context.LoadAfter = loadAverage()
	writeMarkdown(os.Stdout, &report)
	if err := writeFiles(o, &report); err != nil {
		return err
	}
	return outcome(&report)
}

// newWay connects the way name and returns it with the apiserver's version.
func newWay(ctx context.Context, o options, name, prefix string) (way, string, error) {
	switch name {
	case "exec":
		wire := &wireCount{}
		cfg, err := clientcmd.BuildConfigFromFlags("", o.execKubeconfig)
		if err == nil {
			cfg, err = wire.through(cfg)
		}
		if err != nil {
			return nil, "", err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			wire.Close()
			return nil, "", err
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			wire.Close()
			return nil, "", err
		}
		return newExecWay(cs, cfg, wire, o.execNamespace, o.stepImage, prefix), v.GitVersion, nil
	case "atc":
		a, version, err := newAtcWay(ctx, o, prefix)
		if err != nil {
			return nil, "", err
		}
		return a, version, nil
	}
	return nil, "", fmt.Errorf("unknown way %q", name)
}

// countedClientset is a client of kubeconfig's apiserver whose connections wire counts.
func countedClientset(kubeconfig string, wire *wireCount) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg, err = wire.through(cfg); err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func writeFiles(o options, r *Report) error {
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, r); err != nil {
			return err
		}
	}
	if o.markdownPath != "" {
		f, err := os.Create(o.markdownPath)
		if err != nil {
			return err
		}
		writeMarkdown(f, r)
		return f.Close()
	}
	return nil
}

// outcome is an error naming every way whose build failed or whose clean-up did.
func outcome(r *Report) error {
	var failed []string
	for _, res := range r.Ways {
		if res.Error != "" || res.CleanupErr != "" {
			failed = append(failed, res.Way)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("the build failed the %s way", strings.Join(failed, " and "))
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
