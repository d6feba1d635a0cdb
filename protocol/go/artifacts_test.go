// Tests of artifacts between two real shims (PROTOCOL.md 4.8.1, 4.10, 4.11) through the ATC-shaped
// Volume: StreamOut and StreamIn in identity and gzip, the P2P pair done as a pull with a grant,
// a stream resumed through a cutting proxy, and a grant token refused on other routes.

package shim_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	shim "stepshim.dev/protocol/go"
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

func TestVolumeStreamsAndP2P(t *testing.T) {
	a, b := startShim(t), startShim(t)
	ctx := testContext(t)
	srcRoot, dstRoot := t.TempDir(), t.TempDir()
	writeTree(t, srcRoot)
	src := &shim.Volume{Client: a.Client, Root: srcRoot}
	dst := &shim.Volume{Client: b.Client, Root: dstRoot}
	for _, c := range []shim.Compression{shim.Identity, shim.Gzip} {
		rc, err := src.StreamOut(ctx, ".", c)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.StreamIn(ctx, string(c), c, rc); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		_ = rc.Close()
		sameTree(t, srcRoot, filepath.Join(dstRoot, string(c)))
	}
	if _, err := src.StreamOut(ctx, ".", shim.Zstd); !errors.Is(err, shim.ErrCompression) {
		t.Fatalf("zstd: %v", err)
	}
	url, err := dst.GetStreamInP2PURL(ctx, "p2p")
	if err != nil {
		t.Fatal(err)
	}
	// ATC appends ?limit= to the URL before handing it over.
	if err := src.StreamP2POut(ctx, ".", url+"?limit=100.000000", shim.Gzip); err != nil {
		t.Fatal(err)
	}
	sameTree(t, srcRoot, filepath.Join(dstRoot, "p2p"))
	pulls, err := b.Client.Pulls(ctx)
	if err != nil || len(pulls) != 1 || pulls[0].State != shim.PullDone || pulls[0].SHA256 == "" {
		t.Fatalf("pulls: %+v %v", pulls, err)
	}
	// The grant was revoked once the pull ended.
	if grants, err := a.Client.Grants(ctx); err != nil || len(grants) != 0 {
		t.Fatalf("grants left: %+v %v", grants, err)
	}
	if err := src.StreamP2POut(ctx, ".", url, shim.Identity); err == nil {
		t.Fatal("a P2P URL was used twice")
	}
}

func TestGrantsAndResumedStreams(t *testing.T) {
	s := startShim(t)
	ctx := testContext(t)
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
