// The bounds on JSON answers: the largest answers a shim gives at its default limits fit under
// DefaultMaxAnswerBytes, and no input makes decodeAnswer read or hold more than its limit.

package shim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// TestLargestAnswersFit builds the largest answers of a shim at its default limits (PROTOCOL.md
// sections 4 and 7), every field at its widest, and checks that each fits DefaultMaxAnswerBytes.
func TestLargestAnswersFit(t *testing.T) {
	id := strings.Repeat("i", 128)
	path := "/" + strings.Repeat("p", 4095)
	at := time.Date(2026, 11, 22, 10, 0, 0, 123e6, time.UTC)
	code, sig := math.MinInt32, 64
	proc := ProcessStatus{ID: id, PID: math.MaxInt32, State: StateExited,
		Exit:      &Exit{Code: &code, Signal: &sig, Status: 255, Reason: "oom_kill"},
		StartedAt: at, ExitedAt: &at, OutputEnd: math.MaxInt64, StdinOffset: math.MaxInt64,
		StdinClosed: true, TTY: true}
	// The shim quotes at most 512 bytes of a source's error body; control bytes escape to 6 each.
	quoted := strings.Repeat("\x01", 512)
	pull := PullStatus{ID: id, State: PullFailed, Source: "http://[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
		Path: path, Target: path, Bytes: math.MaxUint64, Total: math.MaxUint64, BytesPerSecond: math.MaxUint64,
		Resumes: math.MaxUint32, Reached: true, SHA256: strings.Repeat("f", 64), Entries: math.MaxUint64,
		Error: "the source answered 401: " + quoted + "; nothing was extracted"}
	uses := uint64(math.MaxUint64)
	grant := Grant{ID: id, Path: path, ExpiresInSeconds: 604800, UsesLeft: &uses, Used: math.MaxUint64}
	answers := map[string]struct {
		n   int
		one any
		key string
	}{
		"GET /v1/processes (STEPSHIM_MAX_PROCESSES 4096)": {4096, proc, "processes"},
		"GET /v1/pulls (256 remembered)":                  {256, pull, "pulls"},
		"GET /v1/grants (STEPSHIM_MAX_GRANTS 64)":         {64, grant, "grants"},
	}
	for name, a := range answers {
		list := make([]any, a.n)
		for i := range list {
			list[i] = a.one
		}
		b, err := json.Marshal(map[string]any{a.key: list})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes (%.2f MiB), %d per entry", name, len(b), float64(len(b))/(1<<20), len(b)/a.n)
		if len(b) > DefaultMaxAnswerBytes {
			t.Errorf("%s: %d bytes, over DefaultMaxAnswerBytes %d", name, len(b), DefaultMaxAnswerBytes)
		}
		var out map[string][]json.RawMessage
		if err := decodeAnswer(bytes.NewReader(b), int64(len(b)), DefaultMaxAnswerBytes, name, &out); err != nil {
			t.Errorf("%s: %v", name, err)
		}
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

// FuzzAnswers decodes arbitrary answers into every answer type under a small limit, with the length
// announced or not: an answer over the limit is a *LimitError after at most limit+1 bytes were read
// (none when its announced length is over), one within it decodes or is a JSON error, and nothing
// panics.
func FuzzAnswers(f *testing.F) {
	for _, seed := range []string{
		`{"protocol":1,"version":"0.2.0","boot_id":"b"}`,
		`{"id":"build-1","pid":42,"state":"exited","exit":{"code":2,"signal":null,"status":2},` +
			`"started_at":"2026-11-22T10:00:00.123Z","exited_at":"2026-11-22T10:00:05.456Z",` +
			`"output_end":1234,"stdin_offset":0,"stdin_closed":false,"tty":false}`,
		`{"processes":[{"id":"a","pid":1,"state":"running","exit":null,"started_at":"2026-11-22T10:00:00.123Z"}]}`,
		`{"stdin_offset":3,"stdin_closed":true}`,
		`{"grants":[{"id":"g1","path":"/tmp/build/out","expires_in_seconds":600,"uses_left":4,"used":0}]}`,
		`{"pulls":[{"id":"in-1","state":"done","source":"http://10.0.3.7:7777","path":"/tmp/build/out/",` +
			`"target":"/tmp/build/in","bytes":1,"total":1,"bytes_per_second":4,"resumes":1,"reached":true}]}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`, `{"processes":[` + strings.Repeat(`{},`, 100),
	} {
		f.Add([]byte(seed), uint16(256), true)
		f.Add([]byte(seed), uint16(16), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, limit uint16, announce bool) {
		outs := []func() any{
			func() any { return new(Info) }, func() any { return new(ProcessStatus) },
			func() any { return new(processList) }, func() any { return new(StdinAck) },
			func() any { return new(Grant) }, func() any { return new(PullStatus) },
		}
		length := int64(-1)
		if announce {
			length = int64(len(in))
		}
		for _, out := range outs {
			cr := &countingReader{r: bytes.NewReader(in)}
			err := decodeAnswer(cr, length, int64(limit), "fuzz", out())
			if cr.n > int64(limit)+1 {
				t.Fatalf("read %d bytes under a limit of %d", cr.n, limit)
			}
			var le *LimitError
			over := len(in) > int(limit)
			if over != errors.As(err, &le) || over && !errors.Is(err, ErrAnswerTooLarge) {
				t.Fatalf("%d bytes under a limit of %d: %v", len(in), limit, err)
			}
			if over && announce && cr.n != 0 {
				t.Fatalf("read %d bytes of an answer announced over the limit", cr.n)
			}
		}
	})
}
