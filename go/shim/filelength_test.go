// FilesLength against the real shim: the length its headers announce is the stream's.

package shim_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"stepshim.dev/go/internal/shimtest"
	"stepshim.dev/go/shim"
)

func TestFilesLength(t *testing.T) {
	s := startShim(t)
	ctx := shimtest.Context(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), bytes.Repeat([]byte("x"), 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	n, etag, err := s.Client.FilesLength(ctx, dir+"/")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Client.GetFiles(ctx, dir+"/", &buf); err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) || len(etag) != 32 {
		t.Fatalf("FilesLength %d (etag %q); the stream has %d bytes", n, etag, buf.Len())
	}
	if _, _, err := s.Client.FilesLength(ctx, dir+"/missing"); !shim.IsNotFound(err) {
		t.Fatalf("a missing path: %v, want not found", err)
	}
}
