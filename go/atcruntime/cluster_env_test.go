//go:build cluster

// What cluster_test.go uses: the environment the wrapper passes, the kit's worker, the tree that
// stands in for a cache, manifests of a volume's files, and processes in pods.

package atcruntime

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"stepshim.dev/go/k8s"
	"stepshim.dev/go/shim"
)

type clusterEnv struct {
	kubeconfig, namespace, keyFile, stepImage, shimImage, tree string
}

func readClusterEnv(t *testing.T) clusterEnv {
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	e := clusterEnv{kubeconfig: get("STEPSHIM_KIT_KUBECONFIG"), namespace: get("STEPSHIM_KIT_NAMESPACE"),
		keyFile: get("STEPSHIM_KIT_KEY"), stepImage: get("STEPSHIM_KIT_STEP_IMAGE"),
		shimImage: get("STEPSHIM_KIT_SHIM_IMAGE"), tree: get("STEPSHIM_VOLS_TREE")}
	if len(missing) > 0 {
		t.Fatalf("the cluster test needs %s (tests/cluster/tests.d/87-atc-volumes sets them)", strings.Join(missing, ", "))
	}
	return e
}

func connectKit(t *testing.T, ctx context.Context, e clusterEnv) *k8s.Worker {
	cs, err := k8s.Clientset(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	key, err := k8s.KeyFromFile(e.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	w, err := k8s.NewWorker(ctx, cs, k8s.Config{Namespace: e.namespace, Worker: "atc-volumes", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// tarOfTree is a tar of dir (regular files, directories, symlinks) and its number of files.
func tarOfTree(t *testing.T, dir string) ([]byte, int) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			files++
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), files
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func mib(n int) float64 { return float64(n) / (1 << 20) }

// manifest is a digest of every entry under v (name, type, mode, mtime, size, link, contents).
func manifest(t *testing.T, ctx context.Context, v *PodVolume) string {
	m, _, err := manifestOrEmpty(t, ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// manifestOrEmpty is manifest with the number of regular files; a missing directory has none.
func manifestOrEmpty(t *testing.T, ctx context.Context, v *PodVolume) (string, int, error) {
	rc, err := v.StreamOut(ctx, ".", Raw)
	if shim.IsNotFound(err) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	defer rc.Close()
	var lines []string
	files := 0
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", 0, err
		}
		if h.Name == "./" || h.Name == "." {
			continue
		}
		sum := sha256.New()
		n, _ := io.Copy(sum, tr)
		if h.Typeflag == tar.TypeReg {
			files++
		}
		lines = append(lines, fmt.Sprintf("%s %c %o %d %d %s %x", h.Name, h.Typeflag, h.Mode, h.ModTime.Unix(), n, h.Linkname, sum.Sum(nil)))
	}
	sort.Strings(lines)
	all := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(all[:]), files, nil
}

func mustConnect(t *testing.T, ctx context.Context, s *volumeStore, pod string) *shim.Client {
	c, err := s.pods.Connect(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var runs int

// run runs script with sh in pod and fails the test unless it exits 0.
func run(t *testing.T, ctx context.Context, s *volumeStore, pod, script string) {
	c := mustConnect(t, ctx, s, pod)
	runs++
	id := fmt.Sprintf("sh-%d", runs)
	if _, err := c.Run(ctx, id, shim.Spec{Path: "sh", Args: []string{"-c", script}}); err != nil {
		t.Fatal(err)
	}
	p, err := c.WaitExited(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Exit == nil || p.Exit.Status != 0 {
		t.Fatalf("%s in %s: %+v", script, pod, p.Exit)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
