// Unit tests of the frame decoder: offsets count log frames only, whatever the chunking of the stream.

package shim

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
)

func frame(typ byte, payload string) []byte {
	b := make([]byte, 8, 8+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[4:], uint32(len(payload)))
	return append(b, payload...)
}

// randomChunks hands out r's bytes in reads of 1..7 bytes, as a network might.
type randomChunks struct{ r io.Reader }

func (c randomChunks) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), 1+rand.N(7))])
}

func TestFrameReaderOffsets(t *testing.T) {
	var log bytes.Buffer
	log.Write(frame(FrameKeepalive, ""))
	log.Write(frame(FrameStdout, "out"))
	log.Write(frame(FrameKeepalive, ""))
	log.Write(frame(9, "future"))
	log.Write(frame(FrameStderr, ""))
	log.Write(frame(FrameExit, `{"code":0,"signal":null,"status":0}`))
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(log.Bytes()) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(log.Bytes())) },
		"random":   func() io.Reader { return randomChunks{bytes.NewReader(log.Bytes())} },
	}
	for name, r := range readers {
		fr := NewFrameReader(r(), 100)
		var got []int64
		var types []byte
		for {
			f, err := fr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got = append(got, f.Offset)
			types = append(types, f.Type)
		}
		// Keepalives are skipped and not counted; the unknown type 9 is returned and counted.
		want := []int64{100, 111, 125, 133}
		if !equal(got, want) || !bytes.Equal(types, []byte{1, 9, 2, 3}) {
			t.Fatalf("%s: offsets %v types %v, want %v [1 9 2 3]", name, got, types, want)
		}
		if end := int64(133 + 8 + 35); fr.Offset() != end {
			t.Fatalf("%s: end offset %d, want %d", name, fr.Offset(), end)
		}
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFrameReaderTruncated(t *testing.T) {
	whole := append(frame(FrameStdout, "abc"), frame(FrameStdout, "defgh")...)
	for cut := 12; cut < len(whole); cut++ {
		fr := NewFrameReader(bytes.NewReader(whole[:cut]), 0)
		if _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
		_, err := fr.Next()
		if !errors.Is(err, io.ErrUnexpectedEOF) || fr.Offset() != 11 {
			t.Fatalf("cut at %d: err %v offset %d, want unexpected EOF at 11", cut, err, fr.Offset())
		}
	}
}

func TestFrameReaderRefusesOversize(t *testing.T) {
	h := frame(FrameStdout, "")
	binary.BigEndian.PutUint32(h[4:], MaxFramePayload+1)
	_, err := NewFrameReader(bytes.NewReader(h), 0).Next()
	var fe *FrameError
	if !errors.As(err, &fe) || retryable(err) {
		t.Fatalf("err = %v, want a FrameError that is not retried", err)
	}
}

// goldenFrames is protocol/testdata/frames.json, which the Rust client's tests read too.
type goldenFrames struct {
	HeaderLen  int `json:"header_len"`
	MaxPayload int `json:"max_payload"`
	Cases      []struct {
		Name   string    `json:"name"`
		Start  int64     `json:"start"`
		Input  []segment `json:"input"`
		Frames []struct {
			Type    byte    `json:"type"`
			Offset  int64   `json:"offset"`
			Payload segment `json:"payload"`
		} `json:"frames"`
		End    string `json:"end"`
		Offset int64  `json:"offset"`
	} `json:"cases"`
}

// segment is bytes given as hex, or as one byte repeated.
type segment struct {
	Hex  *string `json:"hex"`
	Fill byte    `json:"fill"`
	Len  int     `json:"len"`
}

func (s segment) bytes(t testing.TB) []byte {
	if s.Hex != nil {
		b, err := hex.DecodeString(*s.Hex)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return bytes.Repeat([]byte{s.Fill}, s.Len)
}

func loadGoldenFrames(t testing.TB) goldenFrames {
	raw, err := os.ReadFile(filepath.Join("..", "..", "protocol", "testdata", "frames.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFrames
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g goldenFrames) input(t testing.TB, i int) []byte {
	var in []byte
	for _, s := range g.Cases[i].Input {
		in = append(in, s.bytes(t)...)
	}
	return in
}

// TestGoldenFrames decodes the shared vectors: the same maximum and the same verdicts as the Rust
// decoder, split into reads of any size.
func TestGoldenFrames(t *testing.T) {
	g := loadGoldenFrames(t)
	if g.MaxPayload != MaxFramePayload || g.HeaderLen != frameHeaderLen {
		t.Fatalf("frames.json: max payload %d header %d; this package: %d and %d",
			g.MaxPayload, g.HeaderLen, MaxFramePayload, frameHeaderLen)
	}
	for i, c := range g.Cases {
		in := g.input(t, i)
		for _, split := range []string{"whole", "one byte"} {
			var r io.Reader = bytes.NewReader(in)
			if split == "one byte" {
				r = iotest.OneByteReader(r)
			}
			fr := NewFrameReader(r, c.Start)
			var n int
			var err error
			for {
				var f Frame
				if f, err = fr.Next(); err != nil {
					break
				}
				if n >= len(c.Frames) {
					t.Fatalf("%s (%s): frame %d beyond the %d expected", c.Name, split, n, len(c.Frames))
				}
				w := c.Frames[n]
				if f.Type != w.Type || f.Offset != w.Offset || !bytes.Equal(f.Payload, w.Payload.bytes(t)) {
					t.Fatalf("%s (%s): frame %d is type %d at %d with %d bytes, want type %d at %d",
						c.Name, split, n, f.Type, f.Offset, len(f.Payload), w.Type, w.Offset)
				}
				n++
			}
			var fe *FrameError
			var end string
			switch {
			case errors.Is(err, io.EOF):
				end = "eof"
			case errors.Is(err, io.ErrUnexpectedEOF):
				end = "truncated"
			case errors.As(err, &fe) && errors.Is(err, ErrAnswerTooLarge):
				end = "too_long"
			default:
				t.Fatalf("%s (%s): unexpected error %v", c.Name, split, err)
			}
			if n != len(c.Frames) || end != c.End || fr.Offset() != c.Offset {
				t.Fatalf("%s (%s): %d frames, end %s at %d; want %d, %s at %d",
					c.Name, split, n, end, fr.Offset(), len(c.Frames), c.End, c.Offset)
			}
		}
	}
}

// FuzzFrames feeds arbitrary streams to the decoder: it never panics, never returns a payload over
// MaxFramePayload, and keeps offsets at frame boundaries, counting log frames only.
func FuzzFrames(f *testing.F) {
	g := loadGoldenFrames(f)
	for i := range g.Cases {
		if in := g.input(f, i); len(in) < 4096 {
			f.Add(in, uint16(g.Cases[i].Start))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, start uint16) {
		fr := NewFrameReader(bytes.NewReader(in), int64(start))
		next := int64(start)
		for {
			f, err := fr.Next()
			if err != nil {
				var fe *FrameError
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &fe) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(f.Payload) > MaxFramePayload || f.Offset < next || f.Type == FrameKeepalive {
				t.Fatalf("frame type %d at %d with %d bytes after offset %d", f.Type, f.Offset, len(f.Payload), next)
			}
			next = f.Offset + frameHeaderLen + int64(len(f.Payload))
			if fr.Offset() != next {
				t.Fatalf("offset %d, want %d", fr.Offset(), next)
			}
		}
	})
}
