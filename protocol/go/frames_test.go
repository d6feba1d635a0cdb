// Unit tests of the frame decoder: offsets count log frames only, whatever the chunking of the stream.

package shim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
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
