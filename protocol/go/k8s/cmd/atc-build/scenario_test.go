// Tests of what the build requires of each step's answer and of the report's table: the cluster
// test (tests/cluster/tests.d/85-atc-build) runs the build itself.

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCheckTaskWantsTheCacheOnTheSecondRunOnly(t *testing.T) {
	cases := []struct {
		out string
		run int
		ok  bool
	}{
		{"cache: miss\nfiles: 3\n", 1, true},
		{"cache: hit run 1\nfiles: 3\n", 2, true},
		{"cache: miss\nfiles: 3\n", 2, false},
		{"cache: hit run 1\nfiles: 3\n", 1, false},
		{"cache: hit run 1\nfiles: 2\n", 2, false},
		{"files: 3\n", 1, false},
	}
	for _, c := range cases {
		err := checkTask(c.out, c.run, 3)
		if (err == nil) != c.ok {
			t.Errorf("checkTask(%q, run %d): %v, want ok=%v", c.out, c.run, err, c.ok)
		}
	}
}

func TestPutVersionNamesTheTasksFiles(t *testing.T) {
	if m := putVersion.FindStringSubmatch(`{"version":{"ref":"0123456789ab","files":"200"}}`); m == nil || m[1] != "200" {
		t.Errorf("a put's version not read: %v", m)
	}
	if putVersion.MatchString(`{"version":{"ref":"","files":"200"}}`) {
		t.Error("a version without a digest taken")
	}
}

func TestMarkdownPutsTheWaysSideBySide(t *testing.T) {
	r := Report{Ways: []Result{
		{Way: "exec", Phases: []Phase{{Name: "get", SetupSecs: 1, RunSecs: 0.5, TotalSecs: 1.5}}, TotalSecs: 1.5},
		{Way: "atc", Phases: []Phase{{Name: "get", SetupSecs: 2, RunSecs: 0.25, TotalSecs: 2.25}},
			TotalSecs: 2.25, Error: "task run 1: boom"},
	}}
	var b bytes.Buffer
	writeMarkdown(&b, &r)
	for _, want := range []string{"| phase | exec | atc |", "| get | 1.50 s (1.00 + 0.50) | 2.25 s (2.00 + 0.25) |",
		"| **total** | **1.50 s** | **2.25 s** |", "FAILED: task run 1: boom"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
	if err := outcome(&r); err == nil || !strings.Contains(err.Error(), "atc") {
		t.Errorf("outcome: %v, want the atc way failed", err)
	}
}
