// Tests of artifacts between two real shims (PROTOCOL.md 4.8.1, 4.10, 4.11): a tree streamed through
// the caller, the same tree pulled pod to pod with a grant (refused once it is revoked), a stream
// resumed through a cutting proxy, and a grant token refused on other routes.

package shim_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

// writeTree makes a small tree with a 2 MiB file, an executable and a symlink.
func writeTree(t *testing.T, root string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 128<<10)
	for name, data := range map[string][]byte{"big.bin": big, "sub/a.txt": []byte("alpha\n"), "run.sh": []byte("#!/bin/sh\n")} {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/a.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
}

func sameTree(t *testing.T, a, b string) {
	t.Helper()
	for _, name := range []string{"big.bin", "sub/a.txt", "run.sh"} {
		x, err1 := os.ReadFile(filepath.Join(a, name))
		y, err2 := os.ReadFile(filepath.Join(b, name))
		if err1 != nil || err2 != nil || sha256.Sum256(x) != sha256.Sum256(y) {
			t.Fatalf("%s differs: %v %v", name, err1, err2)
		}
	}
	if fi, err := os.Stat(filepath.Join(b, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("run.sh mode: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(b, "link")); err != nil || l != "sub/a.txt" {
		t.Fatalf("link: %q %v", l, err)
	}
}

func TestTreeStreamsAndPull(t *testing.T) {
	a, b := startShim(t), startShim(t)
	ctx := shimtest.Context(t)
	srcRoot, dstRoot := t.TempDir(), t.TempDir()
	writeTree(t, srcRoot)
	// Through the caller: a tar of the contents out of one shim and into the other.
	rc, err := a.Client.OpenFiles(ctx, srcRoot+"/")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Client.PutFiles(ctx, filepath.Join(dstRoot, "streamed"), rc); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close()
	sameTree(t, srcRoot, filepath.Join(dstRoot, "streamed"))

	// Pod to pod: the destination pulls with a grant on the source; the bytes skip the caller.
	token, g, err := a.Client.Grant(ctx, srcRoot, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	spec := shim.PullSpec{Source: a.Client.BaseURL(), SourcePin: a.Client.Pin(), Path: srcRoot + "/", Token: token,
		Target: filepath.Join(dstRoot, "pulled")}
	if _, created, err := b.Client.Pull(ctx, "copy", spec, 0); err != nil || !created {
		t.Fatalf("pull: created %v err %v", created, err)
	}
	p, err := b.Client.WaitPull(ctx, "copy")
	if err != nil || p.State != shim.PullDone || p.SHA256 == "" {
		t.Fatalf("pull: %+v %v", p, err)
	}
	sameTree(t, srcRoot, filepath.Join(dstRoot, "pulled"))
	// Once the grant is revoked, a pull with its token fails at the source and leaves nothing.
	if err := a.Client.RevokeGrant(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Client.Pull(ctx, "again", shim.PullSpec{Source: spec.Source, SourcePin: spec.SourcePin, Path: spec.Path,
		Token: token, Target: filepath.Join(dstRoot, "again")}, 0); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Client.WaitPull(ctx, "again"); err == nil || p.State != shim.PullFailed || !strings.Contains(p.Error, "401") {
		t.Fatalf("a pull with a revoked grant: %+v %v", p, err)
	}
	if _, err := os.Stat(filepath.Join(dstRoot, "again")); !os.IsNotExist(err) {
		t.Fatalf("the failed pull left its target: %v", err)
	}
}

func TestGrantsAndResumedStreams(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	root := t.TempDir()
	writeTree(t, root)
	token, g, err := s.Client.Grant(ctx, root, 60e9, 0)
	if err != nil {
		t.Fatal(err)
	}
	reader := s.Client.WithGrantToken(token)
	var whole bytes.Buffer
	if err := reader.GetFiles(ctx, root+"/", &whole); err != nil {
		t.Fatal(err)
	}
	var apiErr *shim.APIError
	if _, err := reader.Info(ctx); !errors.As(err, &apiErr) || apiErr.Status != 403 || apiErr.Code != shim.CodeForbidden {
		t.Fatalf("a grant token on /v1/info: %v", err)
	}
	// Through a proxy that cuts every connection within 300 KB: one uninterrupted stream.
	p := startProxy(t, s, 300_000)
	via := s.clientAt(t, p.Addr(), token)
	rc, err := via.OpenFilesResumable(ctx, root+"/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, whole.Bytes()) || p.cuts.Load() < 3 {
		t.Fatalf("resumed stream: %d of %d bytes, %d cuts", len(got), whole.Len(), p.cuts.Load())
	}
	if err := s.Client.RevokeGrant(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if err := reader.GetFiles(ctx, root+"/", io.Discard); !shim.IsUnauthorized(err) {
		t.Fatalf("a revoked grant: %v", err)
	}
}
