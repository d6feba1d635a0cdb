// Tests of the ATC-shaped adapter against the real shim, including output and stdin through a proxy
// that cuts every connection mid-response.

package shim_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	shim "stepshim.dev/protocol/go"
)

func TestRunExitStatusesAndOutput(t *testing.T) {
	s := startShim(t)
	ctx := testContext(t)
	c := shim.NewContainer(s.Client)
	for _, tc := range []struct {
		script string
		status int
	}{
		{"echo out; echo err >&2; exit 0", 0},
		{"echo out; echo err >&2; exit 1", 1},
		{"echo out; echo err >&2; exit 255", 255},
		{"echo out; echo err >&2; kill -KILL $$", 128 + 9},
	} {
		var stdout, stderr bytes.Buffer
		p, err := c.Run(ctx, shim.ProcessSpec{Path: "/bin/sh", Args: []string{"-c", tc.script}},
			shim.ProcessIO{Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			t.Fatal(err)
		}
		status, err := p.Wait(ctx)
		if err != nil || status != tc.status {
			t.Fatalf("%q: status %d err %v, want %d", tc.script, status, err, tc.status)
		}
		// Wait returns only once every byte is in the writers.
		if stdout.String() != "out\n" || stderr.String() != "err\n" {
			t.Fatalf("%q: stdout %q stderr %q", tc.script, stdout.String(), stderr.String())
		}
	}
}

func TestAttachAndAttachOrRun(t *testing.T) {
	s := startShim(t)
	ctx := testContext(t)
	c := shim.NewContainer(s.Client)
	if _, err := c.Attach(ctx, "nobody", shim.ProcessIO{}); !shim.IsNotFound(err) {
		t.Fatalf("attach to an unknown id: err = %v", err)
	}
	spec := shim.ProcessSpec{ID: "task", Path: "sh", Args: []string{"-c", "read x; echo task $x; exit 7"}}
	stdin := strings.NewReader("one\n")
	var out1 syncBuffer
	p1, err := c.AttachOrRun(ctx, spec, shim.ProcessIO{Stdin: stdin, Stdout: &out1})
	if err != nil {
		t.Fatal(err)
	}
	if p1.ID() != "task" {
		t.Fatalf("id %q", p1.ID())
	}
	// A second caller (an ATC after a restart) attaches to the same process and sees all its output.
	var out2 bytes.Buffer
	p2, err := c.AttachOrRun(ctx, spec, shim.ProcessIO{Stdin: strings.NewReader("one\n"), Stdout: &out2})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []*shim.Process{p1, p2} {
		status, err := p.Wait(ctx)
		if err != nil || status != 7 {
			t.Fatalf("process %d: status %d err %v", i, status, err)
		}
	}
	if out1.String() != "task one\n" || out2.String() != "task one\n" {
		t.Fatalf("outputs %q and %q", out1.String(), out2.String())
	}
	st, err := s.Client.Status(ctx, "task")
	if err != nil || st.StdinOffset != 4 {
		t.Fatalf("stdin was written more than once: %+v %v", st, err)
	}
}

func TestTTYAndSetTTY(t *testing.T) {
	s := startShim(t)
	ctx := testContext(t)
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var out syncBuffer
	p, err := shim.NewContainer(s.Client).Run(ctx, shim.ProcessSpec{
		Path: "sh", Args: []string{"-c", "stty size; read x; stty size"},
		TTY: &shim.TTYSpec{WindowSize: &shim.WindowSize{Columns: 80, Rows: 24}},
	}, shim.ProcessIO{Stdin: stdinR, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the first stty size", func() bool { return strings.Contains(out.String(), "24 80") })
	if err := p.SetTTY(shim.TTYSpec{WindowSize: &shim.WindowSize{Columns: 120, Rows: 40}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stdinW.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	status, err := p.Wait(ctx)
	if err != nil || status != 0 {
		t.Fatalf("status %d err %v; output %q", status, err, out.String())
	}
	if !regexp.MustCompile(`(?s)24 80.*40 120`).MatchString(out.String()) {
		t.Fatalf("the resize did not show: %q", out.String())
	}
	if err := p.SetTTY(shim.TTYSpec{}); !shim.HasCode(err, shim.CodeNotRunning) {
		t.Fatalf("resize after exit: err = %v", err)
	}
}

func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestAttachResumesThroughCutConnections(t *testing.T) {
	s := startShim(t)
	ctx := testContext(t)
	proxy := startProxy(t, s, 4<<10, 64<<10, 1<<20+64<<10)
	cut := s.clientAt(t, proxy.Addr(), s.Token)
	cut.MinBackoff, cut.MaxBackoff = time.Millisecond, 20*time.Millisecond

	const n = 300000
	if _, err := s.Client.Run(ctx, "seq", shim.Spec{Path: "sh", Args: []string{"-c",
		fmt.Sprintf("seq 1 %d & seq 1 %d >&2; wait", n, n)}}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	p, err := shim.NewContainer(cut).Attach(ctx, "seq", shim.ProcessIO{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	status, err := p.Wait(ctx)
	if err != nil || status != 0 {
		t.Fatalf("status %d err %v", status, err)
	}
	want := seqOutput(n)
	if !bytes.Equal(stdout.Bytes(), want) || !bytes.Equal(stderr.Bytes(), want) {
		t.Fatalf("output differs: stdout %d bytes, stderr %d bytes, want %d each", stdout.Len(), stderr.Len(), len(want))
	}
	if proxy.cuts.Load() < 5 {
		t.Fatalf("only %d connections were cut; the test proves nothing", proxy.cuts.Load())
	}
	m, err := s.Client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^stepshim_output_resumes_total 0$`).MatchString(m) {
		t.Fatalf("the shim saw no resumes:\n%s", m)
	}
	t.Logf("%d connections cut", proxy.cuts.Load())
}

func TestStdinRetriesThroughCutConnections(t *testing.T) {
	s := startShim(t)
	ctx := testContext(t)
	// Answers to stdin requests are ~200 bytes: most connections are cut before or inside the first.
	proxy := startProxy(t, s, 512)
	cut := s.clientAt(t, proxy.Addr(), s.Token)
	cut.MinBackoff, cut.MaxBackoff = time.Millisecond, 20*time.Millisecond

	input := make([]byte, 256<<10)
	for i := range input {
		input[i] = byte(rand.N(256))
	}
	if _, err := s.Client.Run(ctx, "cat", shim.Spec{Path: "cat", Stdin: true}); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	followed := make(chan error, 1)
	go func() {
		_, err := s.Client.Follow(ctx, "cat", 0, func(f shim.Frame) error {
			if f.Type == shim.FrameStdout {
				stdout.Write(f.Payload)
			}
			return nil
		})
		followed <- err
	}()
	// Small reads make many stdin requests, so that cuts land on them.
	n, err := cut.CopyStdin(ctx, "cat", 0, &smallReads{bytes.NewReader(input)})
	if err != nil || n != int64(len(input)) {
		t.Fatalf("copied %d of %d: %v", n, len(input), err)
	}
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stdout.Bytes(), input) {
		t.Fatalf("cat echoed %d bytes, want the %d sent byte for byte", stdout.Len(), len(input))
	}
	st, err := s.Client.Status(ctx, "cat")
	if err != nil || st.StdinOffset != int64(len(input)) || !st.StdinClosed || st.Exit.Status != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
	if proxy.cuts.Load() < 20 {
		t.Fatalf("only %d connections were cut; the test proves nothing", proxy.cuts.Load())
	}
	t.Logf("%d connections cut", proxy.cuts.Load())
}

// smallReads returns at most 1 KiB per read.
type smallReads struct{ r io.Reader }

func (s *smallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 1<<10)]) }

func TestFollowResumesAfterIdleConnection(t *testing.T) {
	s := startShim(t)
	ctx := testContext(t)
	c := s.clientAt(t, s.Addr, s.Token)
	// Far below the shim's 10 s keepalive: every quiet spell looks like a dead connection.
	c.FollowIdle = 100 * time.Millisecond
	var out bytes.Buffer
	p, err := shim.NewContainer(c).Run(ctx, shim.ProcessSpec{Path: "sh", Args: []string{"-c",
		"echo one; sleep 0.5; echo two; sleep 0.5; echo three"}}, shim.ProcessIO{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if status, err := p.Wait(ctx); err != nil || status != 0 || out.String() != "one\ntwo\nthree\n" {
		t.Fatalf("status %d err %v output %q", status, err, out.String())
	}
	m, err := s.Client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^stepshim_output_resumes_total 0$`).MatchString(m) {
		t.Fatalf("the idle connection was not resumed:\n%s", m)
	}
}
