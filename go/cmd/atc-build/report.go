// The report of a run: its context (command, date, Kubernetes version, load average before and
// after), a Markdown table of the phases of both builds and the bytes through the controller, every
// way side by side, and the same as JSON.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Context is where and how a run happened.
type Context struct {
	Command    string `json:"command"`
	Date       string `json:"date"`
	Kubernetes string `json:"kubernetes"`
	CPUs       int    `json:"cpus"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	Checks     int    `json:"checks"`
	Files      int    `json:"files"`
	// Delivery is how the atc way's pods get their shim.
	Delivery string `json:"atc_shim_delivery"`
}

// Report is a run's context and its ways' results.
type Report struct {
	Context Context  `json:"context"`
	Ways    []Result `json:"ways"`
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func newContext(b Build, kubernetes string) Context {
	args := append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...)
	return Context{Command: strings.Join(args, " "), Date: time.Now().UTC().Format(time.RFC3339),
		Kubernetes: kubernetes, CPUs: runtime.NumCPU(), LoadBefore: loadAverage(), Checks: b.Checks, Files: b.Files}
}

// cell is a phase's time: total, then set-up + run (+ after, when the step kept something); under
// 10 ms the total alone, in milliseconds.
func cell(p *Phase) string {
	switch {
	case p == nil:
		return "-"
	case p.TotalSecs < 0.01:
		// A step that ran nothing (a resource cache found): its lookup, in milliseconds.
		return fmt.Sprintf("%.1f ms", p.TotalSecs*1000)
	case p.AfterSecs > 0:
		return fmt.Sprintf("%.2f s (%.2f + %.2f + %.2f)", p.TotalSecs, p.SetupSecs, p.RunSecs, p.AfterSecs)
	}
	return fmt.Sprintf("%.2f s (%.2f + %.2f)", p.TotalSecs, p.SetupSecs, p.RunSecs)
}

// writeMarkdown writes the context, the table (a row per phase of each build, the builds' totals
// and the bytes through the controller; a column per way: total, and container set-up + process
// run + what the step kept after) and each way's note and outcome.
func writeMarkdown(w io.Writer, r *Report) {
	c := r.Context
	fmt.Fprintf(w, "`%s`\n\n%s, Kubernetes %s, %d CPUs, load average before %s and after %s; %d checks, "+
		"%d source files; the atc way's shim: %s.\n\n",
		c.Command, c.Date, c.Kubernetes, c.CPUs, c.LoadBefore, c.LoadAfter, c.Checks, c.Files, c.Delivery)
	var names []string
	for _, res := range r.Ways {
		names = append(names, res.Way)
	}
	header := func(first string) {
		fmt.Fprintf(w, "| %s | %s |\n|---|%s\n", first, strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	}
	row := func(first string, cell func(res *Result) string) {
		cells := []string{first}
		for i := range r.Ways {
			cells = append(cells, cell(&r.Ways[i]))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	header("phase")
	for build := 1; build <= 2; build++ {
		for _, phase := range phaseNames(r.Ways, build) {
			row(phase, func(res *Result) string { return cell(findPhase(res, build, phase)) })
		}
		row(fmt.Sprintf("**build %d**", build), func(res *Result) string {
			if len(res.Builds) < build {
				return "-"
			}
			return fmt.Sprintf("**%.2f s**", res.Builds[build-1].Secs)
		})
	}
	for build := 1; build <= 2; build++ {
		row(fmt.Sprintf("bytes through the controller, build %d", build), func(res *Result) string {
			return bytesCell(res, build)
		})
	}
	fmt.Fprintln(w)
	if len(phaseNames(r.Ways, 0)) > 0 {
		fmt.Fprintf(w, "What the build survived, after the builds and apart from their totals (a container each):\n\n")
		header("check")
		for _, phase := range phaseNames(r.Ways, 0) {
			row(phase, func(res *Result) string { return cell(findPhase(res, 0, phase)) })
		}
		fmt.Fprintln(w)
	}
	for _, res := range r.Ways {
		status := "ok"
		if res.Error != "" {
			status = "FAILED: " + res.Error
		}
		fmt.Fprintf(w, "- **%s**: %s. %s; the task runs' caches: %s; put: `%s`.\n", res.Way, res.Note, status,
			strings.Join(res.TaskCaches, ", "), res.Version)
		if res.CleanupErr != "" {
			fmt.Fprintf(w, "  Clean-up failed: %s\n", res.CleanupErr)
		}
	}
}

// bytesCell is the bytes through the controller during a build, with the artifacts' tar streams
// among them for a way that carries them.
func bytesCell(res *Result, build int) string {
	if len(res.Builds) < build {
		return "-"
	}
	b := res.Builds[build-1]
	s := mib(b.ControllerBytes)
	if b.ArtifactBytes != nil {
		s += " (tar " + mib(*b.ArtifactBytes) + ")"
	}
	return s
}

func mib(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

// phaseNames are the phases of build (0: the fault checks) of all ways, in order of first appearance.
func phaseNames(ways []Result, build int) []string {
	var names []string
	seen := map[string]bool{}
	for _, res := range ways {
		for _, p := range res.Phases {
			if p.Build == build && !seen[p.Name] {
				seen[p.Name] = true
				names = append(names, p.Name)
			}
		}
	}
	return names
}

func findPhase(r *Result, build int, name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Build == build && r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

func writeJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
