// Package shimtest runs the real stepshim binary for the module's tests, on 127.0.0.1:0 with a
// token's hash, and holds the small helpers those tests share: a bounded context, polling with a
// deadline, a buffer a stream writes while the test reads it, a process's whole output. Tests only; nothing ships it.
package shimtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"stepshim.dev/go/shim"
)

// Binary is $STEPSHIM_BIN, else the cargo debug build of this repository; a missing binary fails
// the test saying how to build it.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("STEPSHIM_BIN")
	if bin == "" {
		bin = filepath.Join(RepoRoot(t), "target", "debug", "stepshim")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("stepshim binary not found at %s (%v): run `cargo build -p stepshim` in the repository root, "+
			"or set STEPSHIM_BIN to the binary", bin, err)
	}
	return bin
}

// RepoRoot is the repository's root directory, found from this file's place in it (go/internal/shimtest).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("shimtest: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Options of a shim to start; the zero value is Binary's shim at log level info, plain HTTP.
type Options struct {
	// Bin is the binary; empty means Binary(t).
	Bin string
	// Log is STEPSHIM_LOG; empty means info.
	Log string
	// TLSSeed, when set, is STEPSHIM_TLS_SEED (hex): the shim serves TLS 1.3 only.
	TLSSeed string
}

// Proc is a running shim: its address once ready, its log, and Stop.
type Proc struct {
	Addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    Buffer
	once   sync.Once
}

var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// Start runs a shim accepting token and waits up to 15 s for its ready file. The test's end stops
// it; a failed test's log shows the shim's. Only STEPSHIM_ variables of opt reach it, none of the
// test's own environment.
func Start(t testing.TB, token string, opt Options) (*Proc, error) {
	t.Helper()
	bin := opt.Bin
	if bin == "" {
		bin = Binary(t)
	}
	level := opt.Log
	if level == "" {
		level = "info"
	}
	sum := sha256.Sum256([]byte(token))
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPSHIM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// The shim writes its address to the ready file once it serves (PROTOCOL.md section 7).
	cmd.Env = append(cmd.Env, "STEPSHIM_READY_FILE="+ready, "STEPSHIM_LISTEN=127.0.0.1:0",
		"STEPSHIM_TOKEN_SHA256="+hex.EncodeToString(sum[:]), "STEPSHIM_LOG="+level,
		"STEPSHIM_DATA_DIR="+t.TempDir(), "STEPSHIM_GRACE_SECONDS=1", "NO_COLOR=1")
	if opt.TLSSeed != "" {
		cmd.Env = append(cmd.Env, "STEPSHIM_TLS_SEED="+opt.TLSSeed)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	drained := make(chan struct{})
	go p.drain(stderr, drained)
	go func() { <-drained; _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("shim log (%s):\n%s", p.Addr, p.Log())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			p.Addr = strings.TrimSpace(string(b))
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("stepshim exited before it was ready:\n%s", p.Log())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("stepshim wrote no ready file within 15s:\n%s", p.Log())
		}
	}
}

// drain keeps the shim's stderr for the whole run (a full pipe would block the shim).
func (p *Proc) drain(stderr io.Reader, done chan<- struct{}) {
	defer close(done)
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		_, _ = p.log.Write([]byte(ansiEscape.ReplaceAllString(sc.Text(), "") + "\n"))
	}
	_, _ = io.Copy(io.Discard, stderr)
}

// Stop sends TERM, then KILL after 5 s, and waits for the exit; later calls wait only.
func (p *Proc) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	})
	<-p.exited
}

// Log is what the shim wrote to stderr so far.
func (p *Proc) Log() string { return p.log.String() }

// Output follows process id of c from offset to its exit: its stdout, its stderr and the exit.
func Output(ctx context.Context, c *shim.Client, id string, offset int64) (stdout, stderr []byte, exit *shim.Exit, err error) {
	var out, errOut bytes.Buffer
	exit, err = c.Follow(ctx, id, offset, func(f shim.Frame) error {
		switch f.Type {
		case shim.FrameStdout:
			out.Write(f.Payload)
		case shim.FrameStderr:
			errOut.Write(f.Payload)
		}
		return nil
	})
	return out.Bytes(), errOut.Bytes(), exit, err
}

// Context is a context for one test, bounded so that a hang fails instead of stalling CI.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 10 ms until it holds, failing the test after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer that a stream may write while the test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Signal sends sig to the shim process (SIGSTOP and SIGCONT make a shim that answers nothing, as
// one on a lost node).
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }
