package mempool_test

// Hostile review s39g: a sanitizer output that calls the pool, every
// method, at every kind of finding, on the goroutine that finds it (the
// finalizer's included); the lines it gets are the findings, each once.

import (
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39gCaller is a sanitizer output that calls act on the pool at each
// line, keeps the lines, and counts calls under way at once.
type s39gCaller struct {
	p     atomic.Pointer[mempool.Pool]
	act   func(p *mempool.Pool)
	now   atomic.Int64
	most  atomic.Int64
	mu    sync.Mutex
	lines []string
}

func (w *s39gCaller) Write(b []byte) (int, error) {
	if n := w.now.Add(1); n > w.most.Load() {
		w.most.Store(n)
	}
	defer w.now.Add(-1)
	w.mu.Lock()
	w.lines = append(w.lines, string(b))
	w.mu.Unlock()
	if p := w.p.Load(); p != nil {
		w.act(p)
	}
	return len(b), nil
}

func (w *s39gCaller) got() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}

var s39gActs = map[string]func(p *mempool.Pool){
	"Stats":        func(p *mempool.Pool) { _ = p.Stats() },
	"Snapshot":     func(p *mempool.Pool) { _ = p.Snapshot() },
	"WriteSummary": func(p *mempool.Pool) { _ = p.WriteSummary(io.Discard) },
	"MemoryStats":  func(p *mempool.Pool) { _ = p.MemoryStats() },
	"Findings":     func(p *mempool.Pool) { _ = p.Findings() },
	"AllocateClose": func(p *mempool.Pool) {
		if b, err := p.Allocate(500); err == nil {
			_ = b.Close()
		}
	},
	"FreeHeld":    func(p *mempool.Pool) { _ = p.FreeHeld() },
	"SetLimit":    func(p *mempool.Pool) { _ = p.SetLimit(1 << 30); _ = p.SetLimit(0) },
	"StopHolding": func(p *mempool.Pool) { _ = p.StopHolding() },
	"Close":       func(p *mempool.Pool) { _ = p.Close() },
}

// (Coverage: every method of the pool called from the output, at
// each kind of finding -- out-of-bounds and write-after-close read at
// Findings and at a block's Close after the pool's, dropped on the
// finalizer's goroutine, leaked at Close -- with a second queue of the
// pool (On) that is released meanwhile, and an out-of-order one): no
// hang, one call at a time, and the lines are the findings, each once.
func TestHostileS39gOutputCallsEveryMethodAtEveryFinding(t *testing.T) {
	cltest.Watchdog(t, 10*time.Minute)
	names := make([]string, 0, len(s39gActs))
	for name := range s39gActs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { s39gReenter(t, s39gActs[name], name == "Close") })
	}
}

// s39gReenter runs the findings with a writer that calls act; a late act
// (Close) is armed only at the pool's Close, the blocks' Closes and the
// Findings after it.
func s39gReenter(t *testing.T, act func(p *mempool.Pool), late bool) {
	q := cltest.Queue(t)
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	ooo := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	w := &s39gCaller{act: act}
	p, err := mempool.New(imm, mempool.WithSanitizer(), mempool.WithSanitizerOutput(w))
	require.NoError(t, err)
	if !late {
		w.p.Store(p)
	}

	writeAt := func(cq *cl.CommandQueue, b *cl.Buffer, off int64) {
		ev, err := cq.EnqueueWriteBuffer(b, true, off, []byte{1})
		require.NoError(t, err)
		_ = ev.Release()
	}
	// An out-of-bounds write on each queue, and a write after Close.
	var open []*mempool.PooledBuffer
	for _, cq := range []*cl.CommandQueue{q, q2, ooo} {
		b, err := p.On(cq).Allocate(1000)
		require.NoError(t, err)
		writeAt(cq, b.Base(), b.Offset()+1000)
		require.NoError(t, b.Close())
		v, err := p.On(cq).Allocate(2000)
		require.NoError(t, err)
		base, off := v.Base(), v.Offset()
		require.NoError(t, v.Close())
		require.NoError(t, cq.Finish()) // the poison first (an out-of-order queue orders nothing)
		writeAt(cq, base, off+5)
		o, err := p.On(cq).Allocate(3000) // written out of bounds, closed after the pool's Close
		require.NoError(t, err)
		writeAt(cq, o.Base(), o.Offset()+3001)
		open = append(open, o)
	}
	if !within(t, "Findings", func() { _ = p.Findings() }) {
		return
	}
	require.NoError(t, q2.Release()) // a queue of the pool released, blocks of it in quarantine
	// A dropped buffer, found on the finalizer's goroutine.
	func() {
		d, err := p.Allocate(4000)
		require.NoError(t, err)
		_ = d
	}()
	dropped := func() bool {
		for _, l := range w.got() {
			if len(l) > 0 && slices.Contains([]string{"dropped"}, kindOfLine(l)) {
				return true
			}
		}
		return false
	}
	for i := 0; i < 200 && !dropped(); i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	leak, err := p.Allocate(5000)
	require.NoError(t, err)
	w.p.Store(p)
	if !within(t, "the pool's Close", func() { _ = p.Close() }) {
		return
	}
	for _, o := range open {
		if !within(t, "a block's Close after the pool's", func() { _ = o.Close() }) {
			return
		}
	}
	var fs []mempool.Finding
	if !within(t, "Findings after Close", func() { fs = p.Findings() }) {
		return
	}
	var want []string
	for _, f := range fs {
		want = append(want, f.String()+"\n")
	}
	got := w.got()
	slices.Sort(want)
	slices.Sort(got)
	assert.Equal(t, want, got, "each finding's line written once")
	assert.Equal(t, int64(1), w.most.Load(), "one call at a time")
	kinds := findingKinds(fs)
	assert.Equal(t, 6, kinds[mempool.OutOfBounds], "findings: %v", fs)
	assert.Equal(t, 3, kinds[mempool.WriteAfterClose], "findings: %v", fs)
	_ = leak
}

// kindOfLine returns the kind named in a sanitizer line.
func kindOfLine(l string) string {
	const pre = "clpool sanitizer: "
	if len(l) < len(pre) {
		return ""
	}
	rest := l[len(pre):]
	for i, c := range rest {
		if c == ':' {
			return rest[:i]
		}
	}
	return ""
}
