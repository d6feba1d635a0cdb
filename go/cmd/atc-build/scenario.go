// The builds both ways run, step by step, and what each step must print. Build 1: a check container
// reused for N checks, a get of the source and a get of the image (each its own container, each
// output kept as a resource cache), a task run twice in the image get's output (the second run must
// find the first's cache), and a put reading the task's output. Build 2, the same job again at the
// same versions: both gets find their resource caches (no container), the task runs once more (it
// must find the cache of build 1) and the put reads its output. A way implements the steps; runBuild
// times them, counts the bytes through this process, and checks the answers.

package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Build is what a way is asked to run.
type Build struct {
	// Checks is how many checks run in the check container.
	Checks int
	// Files is how many files the get writes into the source tree.
	Files int
	// Faults runs, after the builds, the checks of what a build must survive (ways that have them).
	Faults bool
}

// resource is one of the build's two gets: the source or the task's image.
type resource string

const (
	sourceRes resource = "source"
	imageRes  resource = "image"
)

// stepTime is how long a step took: Setup (the container, its inputs and caches), Run (the
// process itself) and After (what the step keeps once its process is done: a cache).
type stepTime struct {
	Setup, Run, After time.Duration
}

// way runs the build's steps; each method returns the step's stdout and its time.
type way interface {
	// Name is the way's short name; Note says how it runs the build, for the report.
	Name() string
	Note() string
	// CheckContainer creates the check container.
	CheckContainer(ctx context.Context) (time.Duration, error)
	// Check runs the check script once in the check container with argument n.
	Check(ctx context.Context, n int) (string, error)
	// Get runs the get of res in a container of its own and keeps its output as res's resource
	// cache at its version.
	Get(ctx context.Context, res resource, b Build) (string, stepTime, error)
	// Cached is a later build's get of res at the same version: the resource cache found and used
	// as the step's output, no get run; an error when there is none.
	Cached(ctx context.Context, res resource) (stepTime, error)
	// Task creates the container of the task's run (1, 2, ...) and runs the task script.
	Task(ctx context.Context, run int) (string, stepTime, error)
	// Put creates the put's container with the last task run's output and runs the put script.
	Put(ctx context.Context) (string, stepTime, error)
	// Bytes is what went through this process so far: every byte on its connections to the
	// apiserver and the shims, and of those the artifacts' tar streams (-1 for a way that carries
	// none itself).
	Bytes() (wire, artifacts int64)
	// Cleanup deletes what the way created.
	Cleanup(ctx context.Context) error
}

// Phase is one timed part of a build.
type Phase struct {
	// Build is 1 or 2; 0 for a fault check.
	Build     int     `json:"build,omitempty"`
	Name      string  `json:"phase"`
	SetupSecs float64 `json:"setup_secs"`
	RunSecs   float64 `json:"run_secs"`
	AfterSecs float64 `json:"after_secs"`
	TotalSecs float64 `json:"total_secs"`
	// Fault marks a check of what a build survives, run after the builds and not in their totals.
	Fault bool `json:"fault,omitempty"`
}

// BuildTotal is one build of a way: its wall time and the bytes through this process meanwhile.
type BuildTotal struct {
	Secs float64 `json:"total_secs"`
	// ControllerBytes is every byte on this process's connections (both directions).
	ControllerBytes int64 `json:"controller_bytes"`
	// ArtifactBytes is the artifacts' tar streams among them, for a way that carries them.
	ArtifactBytes *int64 `json:"artifact_tar_bytes,omitempty"`
}

// Result is one way's builds.
type Result struct {
	Way    string       `json:"way"`
	Note   string       `json:"note"`
	Phases []Phase      `json:"phases"`
	Builds []BuildTotal `json:"builds"`
	// Version is the last put's version; TaskCaches what each task run said of its cache.
	Version    string   `json:"put_version,omitempty"`
	TaskCaches []string `json:"task_caches,omitempty"`
	Error      string   `json:"error,omitempty"`
	CleanupErr string   `json:"cleanup_error,omitempty"`
	// building is the build whose phases add records.
	building int
}

func (r *Result) add(name string, t stepTime) {
	r.Phases = append(r.Phases, Phase{Build: r.building, Name: name, SetupSecs: t.Setup.Seconds(),
		RunSecs: t.Run.Seconds(), AfterSecs: t.After.Seconds(), TotalSecs: (t.Setup + t.Run + t.After).Seconds()})
}

// runBuild runs both builds of b through w, timing each phase and checking each answer; the first
// failure ends it and is in Result.Error. What w created is deleted at the end, untimed.
func runBuild(ctx context.Context, w way, b Build) Result {
	r := Result{Way: w.Name(), Note: w.Note()}
	err := timed(w, &r, func() error { return build1(ctx, w, b, &r) })
	if err == nil {
		err = timed(w, &r, func() error { return build2(ctx, w, b, &r) })
	}
	// What a build must survive comes after, apart from the totals (ways that have the checks).
	r.building = 0
	if f, ok := w.(interface {
		Faults(context.Context, *Result) error
	}); ok && b.Faults && err == nil {
		err = f.Faults(ctx, &r)
	}
	if err != nil {
		r.Error = err.Error()
	}
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Cleanup(cctx); err != nil {
		r.CleanupErr = err.Error()
	}
	return r
}

// timed runs the next build and records its total: wall time and the bytes through this process.
func timed(w way, r *Result, build func() error) error {
	r.building = len(r.Builds) + 1
	wire0, art0 := w.Bytes()
	start := time.Now()
	err := build()
	t := BuildTotal{Secs: time.Since(start).Seconds()}
	wire, art := w.Bytes()
	t.ControllerBytes = wire - wire0
	if art >= 0 {
		n := art - art0
		t.ArtifactBytes = &n
	}
	r.Builds = append(r.Builds, t)
	return err
}

var (
	putVersion = regexp.MustCompile(`^\{"version":\{"ref":"[0-9a-f]{12}","files":"(\d+)"\}\}$`)
	cacheLine  = regexp.MustCompile(`(?m)^cache: (.*)$`)
)

// build1 is the checks, both gets, the task run twice and the put.
func build1(ctx context.Context, w way, b Build, r *Result) error {
	setup, err := w.CheckContainer(ctx)
	if err != nil {
		return fmt.Errorf("check container: %w", err)
	}
	t0 := time.Now()
	for i := range b.Checks {
		out, err := w.Check(ctx, i)
		if err != nil {
			return fmt.Errorf("check %d: %w", i, err)
		}
		if want := fmt.Sprintf(`[{"ref":"%d"}]`, i); strings.TrimSpace(out) != want {
			return fmt.Errorf("check %d printed %q, want %s", i, out, want)
		}
	}
	r.add(fmt.Sprintf("check container, %d checks", b.Checks), stepTime{Setup: setup, Run: time.Since(t0)})
	for _, res := range []resource{sourceRes, imageRes} {
		out, t, err := w.Get(ctx, res, b)
		if err != nil {
			return fmt.Errorf("get %s: %w", res, err)
		}
		if want := getVersion(res, b); strings.TrimSpace(out) != want {
			return fmt.Errorf("get %s printed %q, want %s", res, out, want)
		}
		r.add("get "+string(res), t)
	}
	for run := 1; run <= 2; run++ {
		if err := task(ctx, w, run, b, r); err != nil {
			return err
		}
	}
	return put(ctx, w, b, r)
}

// build2 is the same job at the same versions: both gets from their resource caches, the task once
// more (finding the cache of build 1's last run) and the put.
func build2(ctx context.Context, w way, b Build, r *Result) error {
	for _, res := range []resource{sourceRes, imageRes} {
		t, err := w.Cached(ctx, res)
		if err != nil {
			return fmt.Errorf("get %s from its resource cache: %w", res, err)
		}
		r.add("get "+string(res)+": resource cache", t)
	}
	if err := task(ctx, w, 3, b, r); err != nil {
		return err
	}
	return put(ctx, w, b, r)
}

func getVersion(res resource, b Build) string {
	if res == imageRes {
		return imageVersion
	}
	return fmt.Sprintf(`{"version":{"ref":"%d"}}`, b.Files)
}

func task(ctx context.Context, w way, run int, b Build, r *Result) error {
	out, t, err := w.Task(ctx, run)
	if err != nil {
		return fmt.Errorf("task run %d: %w", run, err)
	}
	if err := checkTask(out, run, b.Files); err != nil {
		return err
	}
	r.add("task run "+strconv.Itoa(run), t)
	r.TaskCaches = append(r.TaskCaches, cacheLine.FindStringSubmatch(out)[1])
	return nil
}

func put(ctx context.Context, w way, b Build, r *Result) error {
	out, t, err := w.Put(ctx)
	if err != nil {
		return fmt.Errorf("put: %w", err)
	}
	out = strings.TrimSpace(out)
	if m := putVersion.FindStringSubmatch(out); m == nil || m[1] != strconv.Itoa(b.Files) {
		return fmt.Errorf("put printed %q, want a version of the task's output of %d files", out, b.Files)
	}
	r.Version = out
	r.add("put", t)
	return nil
}

// checkTask checks a task run's output: the first finds an empty cache, each later one the stamp
// of the run before; every run reads every source file.
func checkTask(out string, run, files int) error {
	m := cacheLine.FindStringSubmatch(out)
	want := "miss"
	if run > 1 {
		want = "hit run " + strconv.Itoa(run-1)
	}
	if m == nil || m[1] != want {
		return fmt.Errorf("task run %d: want \"cache: %s\", printed %q", run, want, out)
	}
	if !strings.Contains(out, fmt.Sprintf("files: %d\n", files)) {
		return fmt.Errorf("task run %d: want \"files: %d\", printed %q", run, files, out)
	}
	return nil
}
