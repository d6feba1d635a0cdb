// The bound on Properties' answer: the largest store a shim keeps at its default limits, every value
// byte a control character JSON escapes in 6 bytes, fits DefaultMaxPropertiesAnswerBytes.

package shim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestLargestPropertiesAnswerFits(t *testing.T) {
	// STEPSHIM_PROPERTIES_MAX_COUNT 256 names and STEPSHIM_PROPERTIES_MAX_BYTES 4 MiB of names and
	// values: the shortest names leave the most bytes to escape.
	const count, total = 256, 4 << 20
	props := map[string]string{}
	left := total
	for i := range count {
		props[fmt.Sprintf("%x", i)] = ""
		left -= len(fmt.Sprintf("%x", i))
	}
	for i := range count {
		name := fmt.Sprintf("%x", i)
		n := left / (count - i)
		props[name] = strings.Repeat("\x01", n)
		left -= n
	}
	b, err := json.Marshal(props)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes (%.2f MiB)", len(b), float64(len(b))/(1<<20))
	if len(b) > DefaultMaxPropertiesAnswerBytes {
		t.Errorf("%d bytes, over DefaultMaxPropertiesAnswerBytes %d", len(b), DefaultMaxPropertiesAnswerBytes)
	}
	var out map[string]string
	err = decodeAnswer(bytes.NewReader(b), int64(len(b)), DefaultMaxPropertiesAnswerBytes, "properties", &out)
	if err != nil || len(out) != count {
		t.Errorf("%d properties decoded: %v", len(out), err)
	}
}
