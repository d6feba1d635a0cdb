// The real stepshim binary as a child process of a test, on 127.0.0.1:0 with a token's hash: what
// both test harnesses (process_harness_test.go, localpods_test.go) start.

package atcruntime

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shimBin is $STEPSHIM_BIN, else the cargo debug build of this repository.
func shimBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STEPSHIM_BIN")
	if bin == "" {
		abs, err := filepath.Abs(filepath.Join("..", "..", "target", "debug", "stepshim"))
		if err != nil {
			t.Fatal(err)
		}
		bin = abs
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("stepshim binary not found at %s (%v): run `cargo build -p stepshim` in the repository root, "+
			"or set STEPSHIM_BIN", bin, err)
	}
	return bin
}

// shimProc is a running shim: its address once ready, and its log.
type shimProc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	log    *syncBuffer
}

// startShim runs the shim accepting token, logging at level, and waits up to 15 s for its address.
func startShim(t *testing.T, token, level string) (*shimProc, error) {
	sum := sha256.Sum256([]byte(token))
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(shimBin(t))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPSHIM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "STEPSHIM_READY_FILE="+ready, "STEPSHIM_LISTEN=127.0.0.1:0",
		"STEPSHIM_TOKEN_SHA256="+hex.EncodeToString(sum[:]), "STEPSHIM_LOG="+level,
		"STEPSHIM_DATA_DIR="+t.TempDir(), "STEPSHIM_GRACE_SECONDS=1", "NO_COLOR=1")
	p := &shimProc{cmd: cmd, exited: make(chan struct{}), log: &syncBuffer{}}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			p.addr = strings.TrimSpace(string(b))
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("stepshim exited before it was ready:\n%s", p.log.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("stepshim wrote no ready file within 15s")
		}
	}
}

// stop sends TERM, then KILL after 5 s, and waits for the exit.
func (p *shimProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
