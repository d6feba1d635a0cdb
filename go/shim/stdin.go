// Stdin (PROTOCOL.md 4.4): one stdin request, and StdinWriter, which keeps the stdin offset so that a
// request repeated after a lost answer is harmless, and retries until the shim has accepted each write.

package shim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// stdinChunk bounds the body of one stdin request, so a retry resends little.
const stdinChunk = 256 << 10

// WriteStdin sends one POST /v1/processes/{id}/stdin: data are the stdin bytes from offset on, and eof
// closes stdin after them. Bytes before the shim's accepted count are skipped by the shim, so sending
// the same bytes at the same offset twice writes them once. An offset beyond what the shim accepted is
// 409 stdin_gap.
func (c *Client) WriteStdin(ctx context.Context, id string, offset int64, data []byte, eof bool) (*StdinAck, error) {
	path, err := processPath(id, "/stdin")
	if err != nil {
		return nil, err
	}
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if eof {
		q.Set("eof", "1")
	}
	req, err := c.request(ctx, http.MethodPost, path, q, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ack StdinAck
	if err := c.decodeJSON(resp, "the stdin answer", &ack); err != nil {
		return nil, err
	}
	return &ack, nil
}

// StdinWriter writes a process's stdin. Each Write returns once the shim has written all its bytes to
// the process (stdin is back-pressured by the process), retrying across transport errors and 5xx
// answers at the same offset. Close sends EOF. It is not safe for concurrent use.
type StdinWriter struct {
	c      *Client
	ctx    context.Context
	id     string
	offset int64
}

// Stdin returns a StdinWriter for the process whose next stdin byte is at offset (0 for a new
// process; ProcessStatus.StdinOffset to continue where another writer stopped).
func (c *Client) Stdin(ctx context.Context, id string, offset int64) *StdinWriter {
	return &StdinWriter{c: c, ctx: ctx, id: id, offset: offset}
}

// Offset is the count of stdin bytes the shim has accepted through this writer's offsets.
func (w *StdinWriter) Offset() int64 { return w.offset }

// Write sends p in chunks of at most 256 KiB.
func (w *StdinWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), stdinChunk)]
		if err := w.send(chunk, false); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// Close sends EOF. With a tty the shim writes the terminal's EOF character instead.
func (w *StdinWriter) Close() error { return w.send(nil, true) }

func (w *StdinWriter) send(chunk []byte, eof bool) error {
	end := w.offset + int64(len(chunk))
	err := w.c.retry(w.ctx, func() error {
		ack, err := w.c.WriteStdin(w.ctx, w.id, w.offset, chunk, eof)
		if err != nil {
			return err
		}
		if ack.Offset < end {
			// The shim accepted fewer bytes than sent without an error: only possible if another
			// writer is interleaving with this one.
			return fmt.Errorf("shim: stdin of %q accepted up to %d, want %d", w.id, ack.Offset, end)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.offset = end
	return nil
}

// FeedStdin feeds r to the stdin of the process sp describes until r ends (then EOF) or the process
// exits. r is taken to be the process's whole stdin from its first byte: the bytes the shim had
// already accepted (sp.StdinOffset) are read and dropped. Errors are dropped: a process that exits
// or closes its stdin stops reading, as a local one would. How ATC-shaped callers attach a stdin.
func (c *Client) FeedStdin(ctx context.Context, sp *ProcessStatus, r io.Reader) {
	if sp.StdinOffset > 0 {
		if _, err := io.CopyN(io.Discard, r, sp.StdinOffset); err != nil {
			return
		}
	}
	_, _ = c.CopyStdin(ctx, sp.ID, sp.StdinOffset, r)
}

// CopyStdin copies r to the process's stdin from offset on, then sends EOF, whether r ended cleanly
// or with an error (which is returned). It returns the stdin offset reached.
func (c *Client) CopyStdin(ctx context.Context, id string, offset int64, r io.Reader) (int64, error) {
	w := c.Stdin(ctx, id, offset)
	buf := make([]byte, 64<<10)
	_, rerr := copyBuffer(w, r, buf)
	if werr, ok := rerr.(*writeError); ok {
		return w.Offset(), werr.err
	}
	if err := w.Close(); err != nil {
		return w.Offset(), err
	}
	return w.Offset(), rerr
}

// writeError tells a failed write apart from a failed read in copyBuffer.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// copyBuffer is io.CopyBuffer that sends each read at once (stdin is interactive) and tells which side
// failed.
func copyBuffer(w io.Writer, r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, &writeError{werr}
			}
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
