// Compression of volume streams and the StreamIn size limit, done in the kit: the shims always move an
// uncompressed tar, and ATC's bytes cross the web node in the encoding it asks for (raw, gzip, zstd or
// s2, with github.com/klauspost/compress, the library ATC decodes with). The limit counts the
// decompressed tar, so a small compressed stream cannot expand past it.

package atcruntime

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// ErrCompression is the error for an encoding ATC does not name.
var ErrCompression = errors.New("atcruntime: unsupported compression")

// StreamLimitError says a stream went past StreamIn's limit; nothing of it was kept.
type StreamLimitError struct {
	// LimitInMB is the limit as given; Limit is it in bytes.
	LimitInMB float64
	Limit     int64
}

func (e *StreamLimitError) Error() string {
	return fmt.Sprintf("atcruntime: the stream exceeds the volume streaming limit of %g MB (%d bytes of tar); nothing was extracted",
		e.LimitInMB, e.Limit)
}

// checkCompression refuses an encoding that is not one of ATC's ("" is Raw).
func checkCompression(c Compression) error {
	switch c {
	case Raw, "", Gzip, Zstd, S2:
		return nil
	}
	return fmt.Errorf("%w: %q (want raw, gzip, zstd or s2)", ErrCompression, c)
}

// maxLimitMB is the largest limit taken, 2^30 MB (1 PiB of tar): far past any volume, and its bytes
// are exact in an int64, where a larger float64 would overflow the conversion into no limit.
const maxLimitMB = 1 << 30

// limitBytes is limitInMB in bytes, 0 meaning no limit: ATC's semantics, where a limit under one byte
// (0 included) is none. A negative, NaN or infinite limit, or one over maxLimitMB, is an error,
// never no limit.
func limitBytes(limitInMB float64) (int64, error) {
	if !(limitInMB >= 0 && limitInMB <= maxLimitMB) {
		return 0, fmt.Errorf("atcruntime: invalid stream limit %v MB (want 0 to %d)", limitInMB, maxLimitMB)
	}
	return int64(limitInMB * 1024 * 1024), nil
}

// encoder wraps w so that what is written to it reaches w in compression c.
func encoder(w io.Writer, c Compression) (io.WriteCloser, error) {
	switch c {
	case Raw, "":
		return nopWriteCloser{w}, nil
	case Gzip:
		return gzip.NewWriterLevel(w, gzip.BestSpeed)
	case Zstd:
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	case S2:
		return s2.NewWriter(w, s2.WriterConcurrency(1)), nil
	}
	return nil, checkCompression(c)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// decoder reads r in compression c as the plain stream; Close releases the decoder's resources (not r).
func decoder(r io.Reader, c Compression) (io.ReadCloser, error) {
	switch c {
	case Raw, "":
		return io.NopCloser(r), nil
	case Gzip:
		return gzip.NewReader(r)
	case Zstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case S2:
		return io.NopCloser(s2.NewReader(r)), nil
	}
	return nil, checkCompression(c)
}

// encodeStream is rc read in compression c: an encoder in a goroutine writing into a pipe, closing rc
// when done. Closing the result early stops the goroutine and closes rc.
func encodeStream(rc io.ReadCloser, c Compression) (io.ReadCloser, error) {
	if c == Raw || c == "" {
		return rc, nil
	}
	pr, pw := io.Pipe()
	enc, err := encoder(pw, c)
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	go func() {
		_, err := io.Copy(enc, rc)
		if cerr := enc.Close(); err == nil {
			err = cerr
		}
		_ = rc.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// limitedReader fails with a *StreamLimitError once more than limit bytes were read (limit 0: none).
// The error is also kept, so a caller can tell it from the transport's wrapping of it.
type limitedReader struct {
	r        io.Reader
	limit    int64
	limitMB  float64
	read     int64
	exceeded *StreamLimitError
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.exceeded != nil {
		return 0, l.exceeded
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	if l.limit > 0 && l.read > l.limit {
		l.exceeded = &StreamLimitError{LimitInMB: l.limitMB, Limit: l.limit}
		return 0, l.exceeded
	}
	return n, err
}
