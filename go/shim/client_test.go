// Tests of the one-request routes against the real shim: info, health, metrics, auth, spawn, status,
// wait, list, raw output, stdin, signal, resize and delete.

package shim_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

func TestInfoHealthzMetrics(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	if err := s.Client.Healthz(ctx); err != nil {
		t.Fatalf("healthz: %v", err)
	}
	info, err := s.Client.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Protocol != 1 || len(info.BootID) != 32 || info.Version == "" {
		t.Fatalf("info = %+v", info)
	}
	if _, err := s.Client.Run(ctx, "m", shim.Spec{Path: "true"}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, "stepshim_processes_spawned_total 1") {
		t.Fatalf("metrics lack one spawn:\n%s", m)
	}
}

func TestUnauthorized(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	for _, token := range []string{"wrong", ""} {
		c := s.clientAt(t, s.Addr, token)
		_, err := c.Info(ctx)
		var apiErr *shim.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Code != shim.CodeUnauthorized || !shim.IsUnauthorized(err) {
			t.Fatalf("token %q: info error = %v, want 401 unauthorized", token, err)
		}
		// Authentication comes before the route: a spawn tells nothing either.
		if _, _, err := c.Spawn(ctx, "x", shim.Spec{Path: "true"}); !shim.IsUnauthorized(err) {
			t.Fatalf("token %q: spawn error = %v, want 401", token, err)
		}
		// Health needs no token.
		if err := c.Healthz(ctx); err != nil {
			t.Fatalf("healthz without token: %v", err)
		}
	}
	if _, err := s.Client.Status(ctx, "x"); !shim.IsNotFound(err) {
		t.Fatalf("the refused spawn left a process: %v", err)
	}
}

func TestSpawnIdempotentAndConflict(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	spec := shim.Spec{Path: "/bin/sh", Args: []string{"-c", "exit 3"}, Env: []string{"A=1"}}
	p1, created, err := s.Client.Spawn(ctx, "idem", spec)
	if err != nil || !created {
		t.Fatalf("first spawn: created=%v err=%v", created, err)
	}
	p2, created, err := s.Client.Spawn(ctx, "idem", spec)
	if err != nil || created || p2.PID != p1.PID {
		t.Fatalf("second spawn: created=%v pid %d vs %d err=%v", created, p2.PID, p1.PID, err)
	}
	// Spelling out the defaults is the same spec.
	withDefaults := spec
	withDefaults.Stdin = false
	if _, created, err := s.Client.Spawn(ctx, "idem", withDefaults); err != nil || created {
		t.Fatalf("spawn with defaults spelled out: created=%v err=%v", created, err)
	}
	other := spec
	other.Args = []string{"-c", "exit 4"}
	_, _, err = s.Client.Spawn(ctx, "idem", other)
	if !shim.HasCode(err, shim.CodeSpecConflict) || !shim.IsConflict(err) {
		t.Fatalf("different spec: err = %v, want 409 spec_conflict", err)
	}
	p, err := s.Client.WaitExited(ctx, "idem")
	if err != nil {
		t.Fatal(err)
	}
	if p.Exit == nil || p.Exit.Status != 3 || p.Exit.Code == nil || *p.Exit.Code != 3 || p.Exit.Signal != nil {
		t.Fatalf("exit = %+v", p.Exit)
	}
	// Exited but remembered: an equal spawn is still answered with it.
	if p3, created, err := s.Client.Spawn(ctx, "idem", spec); err != nil || created || !p3.Exited() {
		t.Fatalf("spawn after exit: created=%v err=%v", created, err)
	}
	if _, _, err := s.Client.Spawn(ctx, "bad/id", spec); !errors.Is(err, shim.ErrInvalidID) {
		t.Fatalf("bad id: err = %v", err)
	}
}

func TestExecutableNotFound(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	for _, path := range []string{"/nonexistent/tool", "no-such-command-on-path", "/etc/hostname"} {
		_, _, err := s.Client.Spawn(ctx, "nx", shim.Spec{Path: path})
		if !errors.Is(err, shim.ErrExecutableNotFound) || !shim.IsExecutableNotFound(err) {
			t.Fatalf("%s: err = %v, want executable_not_found", path, err)
		}
		if _, err := s.Client.Status(ctx, "nx"); !shim.IsNotFound(err) {
			t.Fatalf("%s: the id was recorded: %v", path, err)
		}
	}
	// Run retries transport errors only: the refusal comes back at once, typed.
	if _, err := s.Client.Run(ctx, "nx", shim.Spec{Path: "/nonexistent"}); !errors.Is(err, shim.ErrExecutableNotFound) {
		t.Fatalf("run: err = %v", err)
	}
}

func TestWaitListAndRawOutput(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	if _, err := s.Client.Run(ctx, "b-reader", shim.Spec{Path: "sh", Args: []string{"-c", "read x; echo got $x"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.Run(ctx, "a-true", shim.Spec{Path: "true"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p, err := s.Client.Wait(ctx, "b-reader", 200*time.Millisecond)
	if err != nil || p.Exited() || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("short wait on a blocked process: %+v after %v, err %v", p, time.Since(start), err)
	}
	list, err := s.Client.List(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "a-true" || list[1].ID != "b-reader" {
		t.Fatalf("list = %+v, err %v", list, err)
	}
	if _, err := s.Client.WriteStdin(ctx, "b-reader", 0, []byte("it\n"), true); err != nil {
		t.Fatal(err)
	}
	p, err = s.Client.Wait(ctx, "b-reader", 30*time.Second)
	if err != nil || !p.Exited() || p.Exit.Status != 0 {
		t.Fatalf("wait: %+v, err %v", p, err)
	}

	out, err := s.Client.Output(ctx, "b-reader", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var stdout bytes.Buffer
	var types []byte
	for {
		f, err := out.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, f.Type)
		if f.Type == shim.FrameStdout {
			stdout.Write(f.Payload)
		}
	}
	if stdout.String() != "got it\n" || types[len(types)-1] != shim.FrameExit {
		t.Fatalf("output %q, frame types %v", stdout.String(), types)
	}
	if out.Offset() != p.OutputEnd || out.End != p.OutputEnd {
		t.Fatalf("offset %d, header end %d, output_end %d", out.Offset(), out.End, p.OutputEnd)
	}
	if _, err := s.Client.Output(ctx, "b-reader", 3, false); !shim.HasCode(err, shim.CodeInvalidOffset) {
		t.Fatalf("offset inside a frame: err = %v", err)
	}
	if _, err := s.Client.Output(ctx, "b-reader", p.OutputEnd+8, false); !shim.HasCode(err, shim.CodeInvalidOffset) {
		t.Fatalf("offset past the end: err = %v", err)
	}
}

func TestStdinOffsetsAndEOF(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	id := "cat"
	if _, err := s.Client.Run(ctx, id, shim.Spec{Path: "sh", Args: []string{"-c", "cat; echo EOF-SEEN; exec sleep 30"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	ack, err := s.Client.WriteStdin(ctx, id, 0, []byte("hello "), false)
	if err != nil || ack.Offset != 6 {
		t.Fatalf("first write: %+v %v", ack, err)
	}
	// A retry of a request whose answer was lost, carrying more: only the new bytes are written.
	ack, err = s.Client.WriteStdin(ctx, id, 0, []byte("hello world\n"), false)
	if err != nil || ack.Offset != 12 {
		t.Fatalf("overlapping retry: %+v %v", ack, err)
	}
	// An exact repeat writes nothing.
	if ack, err = s.Client.WriteStdin(ctx, id, 6, []byte("world\n"), false); err != nil || ack.Offset != 12 {
		t.Fatalf("exact repeat: %+v %v", ack, err)
	}
	if _, err := s.Client.WriteStdin(ctx, id, 100, []byte("x"), false); !shim.HasCode(err, shim.CodeStdinGap) {
		t.Fatalf("gap: err = %v", err)
	}
	// The writer resumes from where the shim stands, across its own chunks.
	w := s.Client.Stdin(ctx, id, 12)
	if _, err := w.Write([]byte("second line\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var out shimtest.Buffer
	waitOutput(t, s, id, &out, "EOF-SEEN\n")
	if got := out.String(); got != "hello world\nsecond line\nEOF-SEEN\n" {
		t.Fatalf("stdin arrived as %q", got)
	}
	p, err := s.Client.Status(ctx, id)
	if err != nil || p.StdinOffset != 24 || !p.StdinClosed {
		t.Fatalf("status after EOF: %+v %v", p, err)
	}
	if ack, err := s.Client.WriteStdin(ctx, id, 24, nil, true); err != nil || !ack.Closed {
		t.Fatalf("EOF again: %+v %v", ack, err)
	}
	if _, err := s.Client.WriteStdin(ctx, id, 24, []byte("late"), false); !shim.HasCode(err, shim.CodeStdinClosed) {
		t.Fatalf("bytes after EOF: err = %v", err)
	}
	if err := s.Client.Delete(ctx, id, true); err != nil {
		t.Fatal(err)
	}

	if _, err := s.Client.Run(ctx, "nostdin", shim.Spec{Path: "sleep", Args: []string{"30"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.WriteStdin(ctx, "nostdin", 0, []byte("x"), false); !shim.HasCode(err, shim.CodeNoStdin) {
		t.Fatalf("stdin of a process without: err = %v", err)
	}
	if _, err := s.Client.Resize(ctx, "nostdin", shim.TTYSize{Cols: 1, Rows: 1}); !shim.HasCode(err, shim.CodeNoTTY) {
		t.Fatalf("resize without a tty: err = %v", err)
	}
	if err := s.Client.Delete(ctx, "nostdin", true); err != nil {
		t.Fatal(err)
	}
}

// waitOutput follows id's output into out until it contains want (the process keeps running).
func waitOutput(t *testing.T, s *testShim, id string, out *shimtest.Buffer, want string) {
	t.Helper()
	ctx := shimtest.Context(t)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Client.Follow(ctx, id, 0, func(f shim.Frame) error {
			if f.Type == shim.FrameStdout {
				_, _ = out.Write(f.Payload)
			}
			return nil
		})
		errc <- err
	}()
	shimtest.Eventually(t, 20*time.Second, "output "+strconv.Quote(want), func() bool { return strings.Contains(out.String(), want) })
}

func TestSignalGoesToTheGroup(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	id := "group"
	if _, err := s.Client.Run(ctx, id, shim.Spec{Path: "sh", Args: []string{"-c", "sleep 100 & echo $!; wait"}}); err != nil {
		t.Fatal(err)
	}
	var out shimtest.Buffer
	waitOutput(t, s, id, &out, "\n")
	child, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("child pid %q: %v", out.String(), err)
	}
	for _, bad := range []string{"NOPE", "0", "65"} {
		if _, err := s.Client.Signal(ctx, id, bad); !shim.HasCode(err, shim.CodeInvalidSignal) {
			t.Fatalf("signal %q: err = %v", bad, err)
		}
	}
	if _, err := s.Client.Signal(ctx, id, "sigterm"); err != nil {
		t.Fatal(err)
	}
	p, err := s.Client.WaitExited(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Exit.Status != 143 || p.Exit.Signal == nil || *p.Exit.Signal != 15 || p.Exit.Code != nil {
		t.Fatalf("exit = %+v, want killed by signal 15", p.Exit)
	}
	// The background child got the signal too (and the shim, its subreaper, reaped it).
	shimtest.Eventually(t, 10*time.Second, "the background sleep to be gone", func() bool {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(child)))
		return os.IsNotExist(err)
	})
	if _, err := s.Client.Signal(ctx, id, "TERM"); !shim.HasCode(err, shim.CodeNotRunning) {
		t.Fatalf("signal after exit: err = %v", err)
	}
}

func TestDelete(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	spec := shim.Spec{Path: "sleep", Args: []string{"100"}}
	if _, err := s.Client.Run(ctx, "d", spec); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.Delete(ctx, "d", false); !shim.HasCode(err, shim.CodeStillRunning) {
		t.Fatalf("delete running: err = %v", err)
	}
	if err := s.Client.Delete(ctx, "d", true); err != nil {
		t.Fatalf("force delete: %v", err)
	}
	if _, err := s.Client.Status(ctx, "d"); !shim.IsNotFound(err) || !shim.HasCode(err, shim.CodeProcessNotFound) {
		t.Fatalf("status after delete: err = %v", err)
	}
	if err := s.Client.Delete(ctx, "d", false); !shim.IsNotFound(err) {
		t.Fatalf("second delete: err = %v", err)
	}
	// The id is free again at once.
	if _, created, err := s.Client.Spawn(ctx, "d", shim.Spec{Path: "true"}); err != nil || !created {
		t.Fatalf("respawn: created=%v err=%v", created, err)
	}
	if _, err := s.Client.WaitExited(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.Delete(ctx, "d", false); err != nil {
		t.Fatalf("delete exited: %v", err)
	}
}
