// Tests of what the builds require of each step's answer, of the report's table and of the counting
// relay: the cluster test (tests/cluster/tests.d/85-atc-build) runs the builds themselves.

package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestCheckTaskWantsTheRunBeforesCache(t *testing.T) {
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
		{"cache: hit run 2\nfiles: 3\n", 3, true},
		{"cache: hit run 1\nfiles: 3\n", 3, false},
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
	tar := int64(3 << 20)
	r := Report{Ways: []Result{
		{Way: "exec", Phases: []Phase{{Build: 1, Name: "get source", SetupSecs: 1, RunSecs: 0.5, TotalSecs: 1.5},
			{Build: 2, Name: "get source: resource cache", SetupSecs: 0.0025, TotalSecs: 0.0025},
			{Build: 2, Name: "put", SetupSecs: 1, RunSecs: 1, TotalSecs: 2}},
			Builds: []BuildTotal{{Secs: 1.5, ControllerBytes: 5 << 20, ArtifactBytes: &tar}, {Secs: 2, ControllerBytes: 1 << 20}}},
		{Way: "atc", Phases: []Phase{{Build: 1, Name: "get source", SetupSecs: 2, RunSecs: 0.25, TotalSecs: 2.25}},
			Builds: []BuildTotal{{Secs: 2.25, ControllerBytes: 1 << 19}}, Error: "task run 1: boom"},
	}}
	var b bytes.Buffer
	writeMarkdown(&b, &r)
	for _, want := range []string{"| phase | exec | atc |", "| get source | 1.50 s (1.00 + 0.50) | 2.25 s (2.00 + 0.25) |",
		"| **build 1** | **1.50 s** | **2.25 s** |", "| put | 2.00 s (1.00 + 1.00) | - |",
		"| get source: resource cache | 2.5 ms | - |", "| **build 2** | **2.00 s** | - |",
		"| bytes through the controller, build 1 | 5.00 MiB (tar 3.00 MiB) | 0.50 MiB |", "FAILED: task run 1: boom"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
	if err := outcome(&r); err == nil || !strings.Contains(err.Error(), "atc") {
		t.Errorf("outcome: %v, want the atc way failed", err)
	}
}

// The relay counts every byte both ways of a real HTTP exchange through it, and the TLS server name
// stays the server's.
func TestRelayCountsBothDirections(t *testing.T) {
	body := strings.Repeat("x", 100000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append(got, body...))
	}))
	defer srv.Close()
	var wire wireCount
	defer wire.Close()
	cfg, err := wire.through(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == srv.URL || cfg.TLSClientConfig.ServerName != "127.0.0.1" {
		t.Fatalf("relay config: host %s, server name %q", cfg.Host, cfg.TLSClientConfig.ServerName)
	}
	resp, err := http.Post(cfg.Host+"/x", "text/plain", strings.NewReader(strings.Repeat("y", 50000)))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if len(got) != 150000 {
		t.Fatalf("%d bytes back, want 150000", len(got))
	}
	// The relay counts a write once it is done: the last may be counted just after the client read it.
	deadline := time.Now().Add(5 * time.Second)
	for wire.Bytes() < 200000 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := wire.Bytes(); n < 200000 || n > 202000 {
		t.Fatalf("counted %d bytes, want the 200000 of the bodies (50000 up, 150000 down) and the heads'", n)
	}
	if _, err := wire.through(&rest.Config{Host: "no-scheme"}); err == nil {
		t.Fatal("a host without a scheme taken")
	}
}
