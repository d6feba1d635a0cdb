// What the encodings cost and gain, on one core, at the levels the kit uses: encode and decode speed
// (MB/s of tar) and the compressed size, for a realistic tree and for random bytes.
//
//	STEPSHIM_BENCH_TREE=$(go env GOMODCACHE)/k8s.io go test -run '^$' -bench Compression -benchtime 3x ./atcruntime
//
// Without STEPSHIM_BENCH_TREE the tree is this repository's protocol directory. results/atc-streaming/
// has the numbers and what they mean for pod-to-pod copies.

package atcruntime

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// tarOfDir is an uncompressed tar of dir's regular files and directories, at most max bytes of
// contents.
func tarOfDir(b *testing.B, dir string, max int64) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || total > max {
			return err
		}
		fi, err := d.Info()
		if err != nil || !(fi.Mode().IsRegular() || fi.IsDir()) {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := io.Copy(tw, f)
			total += n
			return err
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func encodeAll(b *testing.B, data []byte, c Compression) []byte {
	var out bytes.Buffer
	enc, err := encoder(&out, c)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := enc.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		b.Fatal(err)
	}
	return out.Bytes()
}

func BenchmarkCompression(b *testing.B) {
	dir := os.Getenv("STEPSHIM_BENCH_TREE")
	if dir == "" {
		dir = filepath.Join("..", "..", "protocol")
	}
	inputs := []struct {
		name string
		data []byte
	}{{"tree", tarOfDir(b, dir, 256<<20)}, {"random", randomBytes(64 << 20)}}
	for _, in := range inputs {
		for _, c := range []Compression{Gzip, Zstd, S2} {
			packed := encodeAll(b, in.data, c)
			ratio := float64(len(packed)) / float64(len(in.data))
			b.Run(in.name+"/"+string(c)+"/encode", func(b *testing.B) {
				b.SetBytes(int64(len(in.data)))
				for b.Loop() {
					encodeAll(b, in.data, c)
				}
				b.ReportMetric(ratio, "size/raw")
				b.ReportMetric(float64(len(in.data))/(1<<20), "MiB")
			})
			b.Run(in.name+"/"+string(c)+"/decode", func(b *testing.B) {
				b.SetBytes(int64(len(in.data)))
				for b.Loop() {
					d, err := decoder(bytes.NewReader(packed), c)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(io.Discard, d); err != nil {
						b.Fatal(err)
					}
					_ = d.Close()
				}
			})
		}
	}
}
