package memhooks_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s32gOnceWriter writes the bytes it is given, then panics the first time
// only: a writer that keeps half a flush.
type s32gOnceWriter struct {
	buf      bytes.Buffer
	panicked bool
}

func (w *s32gOnceWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if !w.panicked {
		w.panicked = true
		panic("once")
	}
	return len(p), nil
}

// PASSES (exploration): after the writer panics, Allocate and Close of
// blocks go on without error, Flush and Close return the panic's error
// (twice), and the trace read back has no line twice.
func TestHostileS32gPanickingWriterThenFlushClose(t *testing.T) {
	p := pooltest.New(t, nil)
	w := &s32gOnceWriter{}
	rec := memhooks.NewTraceRecorder(w, memhooks.WithFlushEvery(time.Millisecond))
	p.AddHook(rec)
	for i := 0; i < 20; i++ {
		b, err := p.Allocate(int64(1000 + i))
		require.NoError(t, err)
		time.Sleep(3 * time.Millisecond)
		require.NoError(t, b.Close())
	}
	err := rec.Flush()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panicked")
	assert.Equal(t, err, rec.Close())
	assert.Equal(t, err, rec.Close())
	assert.Equal(t, err, rec.Flush())
	n := w.buf.Len()
	b, err := p.Allocate(5000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.Equal(t, n, w.buf.Len(), "written after Close")
	evs, err := trace.Read(bytes.NewReader(w.buf.Bytes()))
	require.NoError(t, err, "%q", w.buf.String())
	seen := map[string]bool{}
	for _, line := range bytes.Split(w.buf.Bytes(), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		assert.False(t, seen[string(line)], "line twice: %q", line)
		seen[string(line)] = true
	}
	t.Logf("%d events", len(evs))
}
