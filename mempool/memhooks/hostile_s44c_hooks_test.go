package memhooks_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/stretchr/testify/require"
)

//go:noinline
func hostileS44cZzzFirst(t *testing.T, p *mempool.Pool) *mempool.PooledBuffer {
	b, err := p.Allocate(4096)
	require.NoError(t, err)
	return b
}

//go:noinline
func hostileS44cAaaSecond(t *testing.T, p *mempool.Pool) *mempool.PooledBuffer {
	b, err := p.Allocate(8192)
	require.NoError(t, err)
	return b
}

// LineProfile.Print's doc: "Children are in the order they were first
// seen." Print built the tree from the records sorted by their stacks'
// keys (innermost frame's name first), so a call site seen second but
// whose function sorts first was printed first (review s44c).
func TestHostileS44cLineProfileChildrenInFirstSeenOrder(t *testing.T) {
	p := pooltest.New(t, nil)
	lp := memhooks.NewLineProfile()
	p.AddHook(lp)
	first := hostileS44cZzzFirst(t, p) // seen first
	defer first.Close()
	second := hostileS44cAaaSecond(t, p) // seen second
	defer second.Close()

	var out bytes.Buffer
	require.NoError(t, lp.Print(&out, 0, memhooks.InUse))
	text := out.String()
	t.Log("\n" + text)
	zzz := strings.Index(text, "hostileS44cZzzFirst")
	aaa := strings.Index(text, "hostileS44cAaaSecond")
	require.True(t, zzz >= 0 && aaa >= 0, "both call sites are in the tree")
	require.Less(t, zzz, aaa, "the call site seen first is printed first (\"Children are in the order they were first seen\")")
}

// WithFlushEvery's doc: "0 or less: with no time bound, written when
// Flush or Close is called or when 64 KiB of lines wait (the trace
// writer's buffer, which never holds more)". It said "until Flush or Close
// only", and the recorder's trace.Writer wrote by itself once 64 KiB were
// buffered (review s44c).
func TestHostileS44cFlushEveryZeroWritesOnlyFullBuffers(t *testing.T) {
	p := pooltest.New(t, nil)
	var out bytes.Buffer
	rec := memhooks.NewTraceRecorder(&out, memhooks.WithFlushEvery(0))
	remove := p.AddHook(rec)
	defer remove()
	churn := func(n int) {
		for range n {
			b, err := p.Allocate(4096)
			require.NoError(t, err)
			require.NoError(t, b.Close())
		}
	}
	churn(10)
	time.Sleep(20 * time.Millisecond) // no timer writes them
	require.Zero(t, out.Len(), "a few lines wait for Flush")
	churn(6000) // about 12,000 lines of about 12 bytes: past 64 KiB
	written := out.Len()
	require.NoError(t, rec.Close())
	require.Greater(t, written, 0, "64 KiB of lines were written")
	require.LessOrEqual(t, out.Len()-written, 64<<10, "no more than the buffer waited for Close")
}
