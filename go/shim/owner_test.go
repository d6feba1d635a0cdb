// Tests of owners on uploads and pulls and of RemoveFiles (PROTOCOL.md 4.8.2, 4.8.3) against the
// real shim.

package shim_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

// ownerOf is the uid and gid of path itself (a symlink's own).
func ownerOf(t *testing.T, path string) shim.Owner {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return shim.Owner{UID: st.Uid, GID: st.Gid}
}

// ownedTar is a directory, a file below a parent it does not name, and a symlink.
func ownedTar(t *testing.T) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []tar.Header{
		{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 4321, Gid: 4321},
		{Name: "x/y/f", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 1, Uid: 4321, Gid: 4321},
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd", Mode: 0o777},
	} {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(make([]byte, h.Size))
	}
	_ = tw.Close()
	return &b
}

func TestPutFilesAsGivesTheOwner(t *testing.T) {
	s := startShim(t)
	skipBefore020(t, s, "owners on uploads")
	ctx := shimtest.Context(t)
	dir := filepath.Join(t.TempDir(), "new", "dir")
	want := shim.Owner{UID: 1000, GID: 1001}
	err := s.Client.PutFilesAs(ctx, dir, &want, ownedTar(t))
	if os.Geteuid() != 0 {
		if !shim.HasCode(err, shim.CodeOwnerNotPermitted) {
			t.Fatalf("a foreign owner from an unprivileged shim: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"..", "", "d", "x", "x/y", "x/y/f", "l"} {
		if got := ownerOf(t, filepath.Join(dir, rel)); got != want {
			t.Errorf("%q is owned by %v, want %v", rel, got, want)
		}
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "x/y/f")); fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("x/y/f kept its set-user-ID bit with an owner given: %v", fi.Mode())
	}
	if got := ownerOf(t, "/etc/passwd"); got != (shim.Owner{}) {
		t.Errorf("the symlink's target changed owner: %v", got)
	}
	err = s.Client.PutFilesAs(ctx, dir, &shim.Owner{UID: 1, GID: ^uint32(0)}, ownedTar(t))
	if !shim.HasCode(err, shim.CodeBadRequest) {
		t.Fatalf("gid 4294967295: %v", err)
	}
}

func TestPullSpecOwner(t *testing.T) {
	src, dst := startShim(t), startShim(t)
	skipBefore020(t, dst, "owners on pulls")
	ctx := shimtest.Context(t)
	root := t.TempDir()
	writeTree(t, root)
	token, _, err := src.Client.Grant(ctx, root, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "in")
	want := shim.Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	if os.Geteuid() == 0 {
		want = shim.Owner{UID: 1000, GID: 1000}
	}
	spec := shim.PullSpec{Source: src.URL, SourcePin: src.Pin, Path: root + "/", Token: token, Target: target, Owner: &want}
	if _, _, err := dst.Client.Pull(ctx, "owned", spec, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if p, err := dst.Client.WaitPull(ctx, "owned"); err != nil {
		t.Fatalf("pull: %+v, %v", p, err)
	}
	err = filepath.Walk(target, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if got := ownerOf(t, path); got != want {
			t.Errorf("%s is owned by %v, want %v", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRemoveFiles(t *testing.T) {
	s := startShim(t)
	skipBefore020(t, s, "DELETE /v1/files")
	ctx := shimtest.Context(t)
	root := t.TempDir()
	writeTree(t, root)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.RemoveFiles(ctx, filepath.Join(root, "out", "keep")); !shim.HasCode(err, shim.CodeInvalidPath) {
		t.Fatalf("a symlinked component: %v", err)
	}
	token, _, err := s.Client.Grant(ctx, root, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Client.WithGrantToken(token).RemoveFiles(ctx, root); !shim.HasCode(err, shim.CodeForbidden) {
		t.Fatalf("a grant token: %v", err)
	}
	if err := s.Client.RemoveFiles(ctx, root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("the tree is still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "keep" {
		t.Fatalf("outside the tree: %q, %v", b, err)
	}
	if err := s.Client.RemoveFiles(ctx, root); !shim.IsNotFound(err) {
		t.Fatalf("removing it again: %v", err)
	}
}
