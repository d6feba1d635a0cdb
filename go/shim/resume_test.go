// Output and stdin that resume by themselves, against the real shim: through a proxy that cuts every
// connection mid-response, and past a connection that stays quiet longer than the client waits.

package shim_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

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
	ctx := shimtest.Context(t)
	proxy := startProxy(t, s, 4<<10, 64<<10, 1<<20+64<<10)
	cut := s.clientAt(t, proxy.Addr(), s.Token)
	cut.MinBackoff, cut.MaxBackoff = time.Millisecond, 20*time.Millisecond

	const n = 300000
	if _, err := s.Client.Run(ctx, "seq", shim.Spec{Path: "sh", Args: []string{"-c",
		fmt.Sprintf("seq 1 %d & seq 1 %d >&2; wait", n, n)}}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, exit, err := shimtest.Output(ctx, cut, "seq", 0)
	if err != nil || exit.Status != 0 {
		t.Fatalf("exit %+v err %v", exit, err)
	}
	want := seqOutput(n)
	if !bytes.Equal(stdout, want) || !bytes.Equal(stderr, want) {
		t.Fatalf("output differs: stdout %d bytes, stderr %d bytes, want %d each", len(stdout), len(stderr), len(want))
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
	ctx := shimtest.Context(t)
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
	ctx := shimtest.Context(t)
	c := s.clientAt(t, s.Addr, s.Token)
	// Far below the shim's 10 s keepalive: every quiet spell looks like a dead connection.
	c.FollowIdle = 100 * time.Millisecond
	if _, err := c.Run(ctx, "quiet", shim.Spec{Path: "sh", Args: []string{"-c",
		"echo one; sleep 0.5; echo two; sleep 0.5; echo three"}}); err != nil {
		t.Fatal(err)
	}
	out, _, exit, err := shimtest.Output(ctx, c, "quiet", 0)
	if err != nil || exit.Status != 0 || string(out) != "one\ntwo\nthree\n" {
		t.Fatalf("exit %+v err %v output %q", exit, err, out)
	}
	m, err := s.Client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^stepshim_output_resumes_total 0$`).MatchString(m) {
		t.Fatalf("the idle connection was not resumed:\n%s", m)
	}
}
