// The frame decoder of PROTOCOL.md 5.2. It owns the resume offset: the position in the output log
// just past the last whole log frame read, which is where a broken stream is resumed.

package shim

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types of PROTOCOL.md 5.2.
const (
	FrameKeepalive = 0
	FrameStdout    = 1
	FrameStderr    = 2
	FrameExit      = 3
)

// MaxFramePayload is the largest payload a frame may carry (PROTOCOL.md 5.2; the Rust crate's
// frame::MAX_PAYLOAD). A longer announced length is a *FrameError before any payload byte is read,
// so one frame never holds more than this. protocol/testdata/frames.json holds it for both sides.
const MaxFramePayload = 1 << 20

const frameHeaderLen = 8

// Frame is one frame of an output log.
type Frame struct {
	// Type is FrameStdout, FrameStderr, FrameExit or a type this version does not know.
	Type byte
	// Offset is the position of the frame's header in the log.
	Offset int64
	// Payload is valid only until the next call of FrameReader.Next.
	Payload []byte
}

// FrameError is a stream that breaks the framing rules; resuming cannot mend it.
type FrameError struct {
	Offset int64
	Reason string
	// Length is the announced payload length of a frame over MaxFramePayload, else 0.
	Length uint32
}

// Is makes errors.Is(err, ErrAnswerTooLarge) true for a frame over MaxFramePayload.
func (e *FrameError) Is(target error) bool { return target == ErrAnswerTooLarge && e.Length > 0 }

func (e *FrameError) Error() string {
	return fmt.Sprintf("shim: bad frame at log offset %d: %s", e.Offset, e.Reason)
}

// FrameReader decodes a frame stream that starts at a frame boundary of the log.
type FrameReader struct {
	r      *bufio.Reader
	offset int64
	header [frameHeaderLen]byte
	buf    []byte
}

// NewFrameReader decodes r, whose first byte is at log offset offset.
func NewFrameReader(r io.Reader, offset int64) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10), offset: offset}
}

// Offset is the log offset just past the last whole log frame returned: where to resume.
func (fr *FrameReader) Offset() int64 { return fr.offset }

// Next returns the next log frame, skipping keepalives (which are not part of the log). Frames of
// unknown types are returned too, so that the caller may skip them; they count toward the offset like
// any log frame. At a clean end between frames Next returns io.EOF; a stream that ends inside a frame
// returns io.ErrUnexpectedEOF and leaves Offset at the start of that frame.
func (fr *FrameReader) Next() (Frame, error) {
	for {
		if _, err := io.ReadFull(fr.r, fr.header[:]); err != nil {
			return Frame{}, err
		}
		typ := fr.header[0]
		n := binary.BigEndian.Uint32(fr.header[4:8])
		if n > MaxFramePayload {
			return Frame{}, &FrameError{Offset: fr.offset, Length: n,
				Reason: fmt.Sprintf("payload length %d over the maximum of %d", n, MaxFramePayload)}
		}
		if typ == FrameKeepalive {
			if n != 0 {
				return Frame{}, &FrameError{Offset: fr.offset, Reason: "keepalive with a payload"}
			}
			continue
		}
		if cap(fr.buf) < int(n) {
			fr.buf = make([]byte, n, max(int(n), 32<<10))
		}
		payload := fr.buf[:n]
		if _, err := io.ReadFull(fr.r, payload); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		f := Frame{Type: typ, Offset: fr.offset, Payload: payload}
		fr.offset += frameHeaderLen + int64(n)
		return f, nil
	}
}
