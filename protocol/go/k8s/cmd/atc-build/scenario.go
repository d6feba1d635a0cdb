// The build both ways run, step by step, and what each step must print: a check container reused
// for N checks, a get writing a source tree and a rootfs/ + metadata.json image, a task run twice
// in that image (the second run must find the first's cache), and a put reading the task's output.
// A way implements the steps; runBuild times them and checks their answers.

package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Where the steps work in their containers, as ATC lays out a build's directories.
const (
	checkDir = "/tmp/build/check"
	getDir   = "/tmp/build/get"
	taskDir  = "/tmp/build/task"
	putDir   = "/tmp/build/put"
	// markerPath is the file only the get's image has: a task that sees it ran in that image.
	markerPath = "/etc/atc-build-marker"
)

// checkScript is a resource's check: it reads ATC's request on stdin and prints one version, the
// number it is given, so that every check's answer can be told apart.
const checkScript = `read -r request || true
case $request in *source*) ;; *) echo "no request on stdin" >&2; exit 1 ;; esac
printf '[{"ref":"%s"}]\n' "$1"`

// getScript is a resource's in: $1 the directory, $2 the number of source files. It writes
// source/ (the tree) and image/ (rootfs/: the running image's busybox files and a marker, and
// metadata.json), then prints the version fetched.
const getScript = `set -e
read -r request || true
cd "$1"
mkdir -p source/src image/rootfs/tmp
i=0
while [ "$i" -lt "$2" ]; do
	printf 'package src\n\n// File %d of the build'"'"'s sources.\nconst F%d = %d\n' "$i" "$i" "$i" > "source/src/f$i.go"
	i=$((i + 1))
done
cp -a /bin /sbin /usr /etc image/rootfs/
chmod 1777 image/rootfs/tmp
echo atc-build-image > image/rootfs` + markerPath + `
echo '{"env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}' > image/metadata.json
printf '{"version":{"ref":"%s"}}\n' "$2"`

// taskScript is the task: $1 the directory, $2 the image's root as the task sees it ("" when the
// task runs in the image), $3 the run's number. It checks that it runs in (or has) the get's image,
// reports whether the cache holds an earlier run's stamp, stamps it, and writes a digest of the
// sources to out/.
const taskScript = `set -e
cd "$1"
test -f "$2` + markerPath + `" || { echo "not in the get's image: no $2` + markerPath + `" >&2; exit 1; }
if [ -f cache/stamp ]; then echo "cache: hit $(cat cache/stamp)"; else echo "cache: miss"; fi
echo "run $3" > cache/stamp
n=$(find source/src -type f | wc -l)
find source/src -type f | sort | xargs cat | md5sum | cut -c1-32 > out/sum
echo "$n" > out/files
echo "files: $n"`

// putScript is a resource's out: it reads the task's output and prints the version it "pushed".
const putScript = `set -e
read -r request || true
cd "$1"
test -s out/sum || { echo "no out/sum" >&2; exit 1; }
printf '{"version":{"ref":"%s","files":"%s"}}\n' "$(cut -c1-12 out/sum)" "$(cat out/files)"`

// request is the JSON ATC writes on a resource script's stdin.
const request = `{"source":{"uri":"https://example.com/repo.git"},"version":null}` + "\n"

// Build is what a way is asked to run.
type Build struct {
	// Checks is how many checks run in the check container.
	Checks int
	// Files is how many files the get writes into the source tree.
	Files int
	// Faults runs, after the build, the checks of what a build must survive (ways that have them).
	Faults bool
}

// stepTime is how long a step took: Setup (the container, its inputs and caches), Run (the
// process itself) and After (what the step keeps once its process is done: a task cache).
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
	// Get creates the get's container and runs the get script.
	Get(ctx context.Context, b Build) (string, stepTime, error)
	// Task creates the container of the task's run (1 or 2) and runs the task script.
	Task(ctx context.Context, run int) (string, stepTime, error)
	// Put creates the put's container with the task's (second run's) output and runs the put script.
	Put(ctx context.Context) (string, stepTime, error)
	// Cleanup deletes what the way created.
	Cleanup(ctx context.Context) error
}

// Phase is one timed part of a build.
type Phase struct {
	Name      string  `json:"phase"`
	SetupSecs float64 `json:"setup_secs"`
	RunSecs   float64 `json:"run_secs"`
	AfterSecs float64 `json:"after_secs"`
	TotalSecs float64 `json:"total_secs"`
	// Fault marks a check of what a build survives, run after the build and not in its total.
	Fault bool `json:"fault,omitempty"`
}

// Result is one way's build.
type Result struct {
	Way       string  `json:"way"`
	Note      string  `json:"note"`
	Phases    []Phase `json:"phases"`
	TotalSecs float64 `json:"total_secs"`
	Version   string  `json:"put_version,omitempty"`
	CacheRun2 string  `json:"task_run_2_cache,omitempty"`
	// ControllerBytes is what the way carried of the artifacts through this process, when it does.
	ControllerBytes *int64 `json:"controller_bytes,omitempty"`
	Error           string `json:"error,omitempty"`
	CleanupErr      string `json:"cleanup_error,omitempty"`
}

func (r *Result) add(name string, t stepTime) {
	r.Phases = append(r.Phases, Phase{Name: name, SetupSecs: t.Setup.Seconds(), RunSecs: t.Run.Seconds(),
		AfterSecs: t.After.Seconds(), TotalSecs: (t.Setup + t.Run + t.After).Seconds()})
}

// runBuild runs b through w, timing each phase and checking each answer; the first failure ends it
// and is in Result.Error. What w created is deleted at the end, untimed.
func runBuild(ctx context.Context, w way, b Build) Result {
	r := Result{Way: w.Name(), Note: w.Note()}
	start := time.Now()
	err := steps(ctx, w, b, &r)
	r.TotalSecs = time.Since(start).Seconds()
	// What a build must survive comes after, untimed in the total (ways that have the checks).
	if f, ok := w.(interface {
		Faults(context.Context, *Result) error
	}); ok && b.Faults && err == nil {
		err = f.Faults(ctx, &r)
	}
	if c, ok := w.(interface{ ControllerBytes() int64 }); ok {
		n := c.ControllerBytes()
		r.ControllerBytes = &n
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

var (
	putVersion = regexp.MustCompile(`^\{"version":\{"ref":"[0-9a-f]{12}","files":"(\d+)"\}\}$`)
	cacheLine  = regexp.MustCompile(`(?m)^cache: (.*)$`)
)

func steps(ctx context.Context, w way, b Build, r *Result) error {
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

	out, t, err := w.Get(ctx, b)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if want := fmt.Sprintf(`{"version":{"ref":"%d"}}`, b.Files); strings.TrimSpace(out) != want {
		return fmt.Errorf("get printed %q, want %s", out, want)
	}
	r.add("get", t)

	for run := 1; run <= 2; run++ {
		out, t, err := w.Task(ctx, run)
		if err != nil {
			return fmt.Errorf("task run %d: %w", run, err)
		}
		if err := checkTask(out, run, b.Files); err != nil {
			return err
		}
		r.add("task run "+strconv.Itoa(run), t)
		if run == 2 {
			r.CacheRun2 = cacheLine.FindStringSubmatch(out)[1]
		}
	}

	out, t, err = w.Put(ctx)
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

// checkTask checks a task run's output: the first finds an empty cache, the second the first's
// stamp; both read every source file.
func checkTask(out string, run, files int) error {
	m := cacheLine.FindStringSubmatch(out)
	want := "miss"
	if run == 2 {
		want = "hit run 1"
	}
	if m == nil || m[1] != want {
		return fmt.Errorf("task run %d: want \"cache: %s\", printed %q", run, want, out)
	}
	if !strings.Contains(out, fmt.Sprintf("files: %d\n", files)) {
		return fmt.Errorf("task run %d: want \"files: %d\", printed %q", run, files, out)
	}
	return nil
}
