package mempool_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// offByOne is the commonest out-of-bounds write: a loop bound of <=
// instead of <, so that work-item n writes x[n] of an n-int block.
const offByOne = `
kernel void upto(global int *x, long xo, long n) {
	long i = get_global_id(0);
	if (i <= n) x[xo + i] = (int)i + 1;
}`

// sanPolicies are the pool's two policies, for tests that run on each.
var sanPolicies = []struct {
	name string
	opts []mempool.Option
}{
	{"bins", nil},
	{"arena", []mempool.Option{mempool.WithArena()}},
}

// sanFixture is a sanitized pool over a counting Immediate allocator
// (pooltest: every device buffer freed exactly once when the test ends),
// printing its findings into out.
type sanFixture struct {
	q    *cl.CommandQueue
	pool *mempool.Pool
	out  *syncBuffer
}

func newSanFixture(t *testing.T, opts ...mempool.Option) *sanFixture {
	t.Helper()
	q := cltest.Queue(t)
	out := &syncBuffer{}
	opts = append([]mempool.Option{mempool.WithSanitizer(), mempool.WithSanitizerOutput(out)}, opts...)
	return &sanFixture{q: q, pool: pooltest.New(t, q, opts...), out: out}
}

// syncBuffer is a bytes.Buffer safe for the sanitizer's writes from the
// finalizer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// kernel builds src on q's context and returns its kernel called name,
// released when the test ends.
func kernel(t *testing.T, q *cl.CommandQueue, src, name string) *cl.Kernel {
	t.Helper()
	prog, err := q.Context().BuildProgram(src, "")
	require.NoError(t, err)
	t.Cleanup(func() { prog.Release() })
	k, err := prog.Kernel(name)
	require.NoError(t, err)
	t.Cleanup(func() { k.Release() })
	return k
}

// runUpto runs offByOne over b, an n-int block, on q.
func runUpto(t *testing.T, q *cl.CommandQueue, k *cl.Kernel, b *mempool.PooledBuffer, n int) {
	t.Helper()
	if b.SVM() != nil {
		require.NoError(t, k.SetArgSVMPointer(0, b.SVM(), 0))
		require.NoError(t, k.SetArg(1, b.Offset()/4))
		require.NoError(t, k.SetArg(2, int64(n)))
	} else {
		require.NoError(t, k.SetArgs(b.Base(), b.Offset()/4, int64(n)))
	}
	require.NoError(t, q.EnqueueKernel(k, []int{n + 1}, nil))
}

// thisFile is how sites in this file start.
const thisFile = "sanitize_test.go:"

func TestSanitizerOutOfBounds(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			k := kernel(t, f.q, offByOne, "upto")
			const n = 1000
			b, err := f.pool.Allocate(4 * n)
			require.NoError(t, err)
			id := b.ID()
			// The next block, in an arena its neighbour, stays as written:
			// x[n] lands in b's guard.
			next, err := f.pool.Allocate(4 * n)
			require.NoError(t, err)
			zeros := make([]byte, 4*n)
			require.NoError(t, f.q.WriteBuffer(next.Base(), next.Offset(), zeros))
			runUpto(t, f.q, k, b, n)
			require.NoError(t, b.Close())
			got := f.pool.Findings()
			after := make([]byte, 4*n)
			require.NoError(t, f.q.ReadBuffer(next.Base(), next.Offset(), after))
			assert.Equal(t, zeros, after, "the neighbour is untouched")
			require.NoError(t, next.Close())
			require.Len(t, got, 1, "%v", got)
			assert.Equal(t, mempool.OutOfBounds, got[0].Kind)
			assert.Equal(t, id, got[0].BlockID)
			assert.Equal(t, int64(4*n), got[0].Size)
			assert.Equal(t, int64(4*n), got[0].Offset, "x[n] of an n-int block is at 4n")
			assert.Contains(t, got[0].AllocSite, thisFile)
			assert.Contains(t, got[0].AllocSite, "TestSanitizerOutOfBounds")
			assert.Contains(t, got[0].CloseSite, thisFile)
			assert.NotEqual(t, got[0].AllocSite, got[0].CloseSite)
			assert.Equal(t, got[0].String()+"\n", f.out.String(), "printed once, as found")
			assert.Equal(t, got, f.pool.Findings(), "a finding is reported once")
		})
	}
}

// TestSanitizerOffByOneOnEachSize writes one element past blocks of sizes
// that are not multiples of the element, of a bin's or the arena's
// rounding, and of nothing at all.
func TestSanitizerOffByOneOnEachSize(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			k := kernel(t, f.q, offByOne, "upto")
			for _, n := range []int{1, 7, 64, 255, 1000, 4096, 100_000} {
				b, err := f.pool.Allocate(int64(4 * n))
				require.NoError(t, err)
				runUpto(t, f.q, k, b, n)
				require.NoError(t, b.Close())
			}
			got := f.pool.Findings()
			require.Len(t, got, 7)
			for i, n := range []int{1, 7, 64, 255, 1000, 4096, 100_000} {
				assert.Equal(t, mempool.OutOfBounds, got[i].Kind)
				assert.Equal(t, int64(4*n), got[i].Offset)
			}
		})
	}
}

func TestSanitizerWriteAfterClose(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			b, err := f.pool.Allocate(4000)
			require.NoError(t, err)
			id := b.ID()
			kept := b.Buffer() // an arena's: a sub-buffer of the block
			require.NotNil(t, kept)
			require.NoError(t, f.q.WriteBuffer(kept, 0, make([]byte, 4000)))
			require.NoError(t, b.Close())
			// As a new user would try it: the write succeeds.
			require.NoError(t, f.q.WriteBuffer(kept, 8, []byte{1, 2, 3, 4}))
			got := f.pool.Findings()
			require.Len(t, got, 1, "%v", got)
			assert.Equal(t, mempool.WriteAfterClose, got[0].Kind)
			assert.Equal(t, id, got[0].BlockID)
			assert.Equal(t, int64(4000), got[0].Size)
			assert.Equal(t, int64(8), got[0].Offset)
			assert.Contains(t, got[0].AllocSite, thisFile)
			assert.Contains(t, got[0].CloseSite, thisFile)
			assert.Contains(t, f.out.String(), "write-after-close")
			// Found once, whether Findings or the quarantine's end checks it again.
			for range mempool.SanitizerQuarantineBlocks + 1 {
				c, err := f.pool.Allocate(100)
				require.NoError(t, err)
				require.NoError(t, c.Close())
			}
			assert.Len(t, f.pool.Findings(), 1)
		})
	}
}

// TestSanitizerWriteAfterCloseFoundAtQuarantineEnd writes through a kept
// buffer, then pushes the block out of the quarantine with newer ones:
// the check at its end finds the write.
func TestSanitizerWriteAfterCloseFoundAtQuarantineEnd(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			b, err := f.pool.Allocate(4096)
			require.NoError(t, err)
			base, off := b.Base(), b.Offset()
			require.NoError(t, b.Close())
			require.NoError(t, f.q.WriteBuffer(base, off+100, []byte{7}))
			for range mempool.SanitizerQuarantineBlocks {
				c, err := f.pool.Allocate(4096)
				require.NoError(t, err)
				require.NoError(t, c.Close())
			}
			// The block left quarantine: Findings checks only those still
			// there, so the check at its end found the write.
			got := f.pool.Findings()
			require.Len(t, got, 1)
			assert.Equal(t, mempool.WriteAfterClose, got[0].Kind)
			assert.Equal(t, int64(100), got[0].Offset)
		})
	}
}

// dropOne allocates a block and drops it without Close.
//
//go:noinline
func dropOne(t *testing.T, p *mempool.Pool) uint64 {
	b, err := p.Allocate(3000)
	require.NoError(t, err)
	return b.ID()
}

// collectUntil runs the garbage collector until p has a finding of kind,
// and returns the findings; it fails the test after a few seconds.
func collectUntil(t *testing.T, p *mempool.Pool, kind mempool.FindingKind) []mempool.Finding {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		got := p.Findings()
		for _, f := range got {
			if f.Kind == kind {
				return got
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %v finding after collections", kind)
	return nil
}

// waitOutput waits until out holds s; it fails the test after a few
// seconds.
func waitOutput(t *testing.T, out *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("output lacks %q: %q", s, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSanitizerDropped(t *testing.T) {
	for _, pol := range sanPolicies {
		for _, safety := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/dropSafety=%v", pol.name, safety), func(t *testing.T) {
				f := newSanFixture(t, append(pol.opts, mempool.WithDropSafety(safety))...)
				id := dropOne(t, f.pool)
				got := collectUntil(t, f.pool, mempool.Dropped)
				require.Len(t, got, 1)
				assert.Equal(t, mempool.Finding{Kind: mempool.Dropped, BlockID: id, Size: 3000, AllocSite: got[0].AllocSite}, got[0])
				assert.Contains(t, got[0].AllocSite, "dropOne")
				// The line is handed to the output once the sanitizer's
				// lock is let go, after the finding is recorded.
				waitOutput(t, f.out, "dropped")
			})
		}
	}
}

func TestSanitizerLeakedAtClose(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			k := kernel(t, f.q, offByOne, "upto")
			open, err := f.pool.Allocate(500)
			require.NoError(t, err)
			closed, err := f.pool.Allocate(500)
			require.NoError(t, err)
			require.NoError(t, closed.Close())
			require.NoError(t, f.pool.Close())
			got := f.pool.Findings()
			require.Len(t, got, 1, "%v", got)
			assert.Equal(t, mempool.Finding{Kind: mempool.LeakedAtClose, BlockID: open.ID(), Size: 500, AllocSite: got[0].AllocSite}, got[0])
			assert.Contains(t, got[0].AllocSite, "TestSanitizerLeakedAtClose")

			// Closing it later stays legal, and is still checked.
			runUpto(t, f.q, k, open, 125)
			require.NoError(t, open.Close())
			got = f.pool.Findings()
			require.Len(t, got, 2)
			assert.Equal(t, mempool.OutOfBounds, got[1].Kind)
			assert.Equal(t, int64(500), got[1].Offset)
			assert.Equal(t, 2, strings.Count(f.out.String(), "\n"))
		})
	}
}

// lateWrite spins, reading the block, then writes x[at]: a command that
// still writes the block long after it was enqueued.
const lateWrite = `
kernel void late(volatile global int *x, long xo, long at, int iters) {
	int acc = 0;
	for (int k = 0; k < iters; k++) acc += x[xo + k % 16];
	x[xo + at] = acc | 1;
}`

// TestSanitizerOrdersChecksAfterRecordedQueues closes a block at once
// after enqueueing, on another queue it recorded, a kernel that writes it
// late: a write in bounds is no finding (the poison comes after it), one
// past the end is (the check comes after it).
func TestSanitizerOrdersChecksAfterRecordedQueues(t *testing.T) {
	q := cltest.Queue(t)
	if cltest.Simulator(q) {
		t.Skip("a kernel that spins is too slow on a simulator")
	}
	q2 := cltest.SecondQueue(t, q, 0)
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			out := &syncBuffer{}
			p := pooltest.New(t, q, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))...)
			k := kernel(t, q, lateWrite, "late")
			const n = 64
			for _, at := range []int64{n - 1, n} {
				b, err := p.Allocate(4 * n)
				require.NoError(t, err)
				require.NoError(t, b.RecordQueue(q2))
				after(t, q2, q) // the user orders q2 after the block's handover to q
				require.NoError(t, k.SetArgs(b.Base(), b.Offset()/4, at, int32(2_000_000)))
				require.NoError(t, q2.EnqueueKernel(k, []int{1}, nil))
				require.NoError(t, q2.Flush())
				require.NoError(t, b.Close())
			}
			got := p.Findings()
			require.Len(t, got, 1, "%v", got)
			assert.Equal(t, mempool.OutOfBounds, got[0].Kind)
			assert.Equal(t, int64(4*n), got[0].Offset)
		})
	}
}

// TestSanitizerOutOfOrderQueue checks blocks used on an out-of-order
// queue: a correct kernel is no finding, an off-by-one one is.
func TestSanitizerOutOfOrderQueue(t *testing.T) {
	q := cltest.Queue(t)
	ooo := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			p := pooltest.New(t, q, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))...)
			k := kernel(t, q, offByOne, "upto")
			on := p.On(ooo)
			const n = 256
			for i := range 20 {
				b, err := on.Allocate(4 * n)
				require.NoError(t, err)
				bound := n - 1
				if i == 10 {
					bound = n
				}
				runUpto(t, ooo, k, b, bound)
				require.NoError(t, b.Close())
			}
			got := p.Findings()
			require.Len(t, got, 1, "%v", got)
			assert.Equal(t, mempool.OutOfBounds, got[0].Kind)
			assert.Equal(t, int64(4*n), got[0].Offset)
		})
	}
}

// TestSanitizerDeferred checks the blocks of an allocator without a queue
// on the sanitizer's own, their commands completed before Close.
func TestSanitizerDeferred(t *testing.T) {
	q := cltest.Queue(t)
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			def, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
			require.NoError(t, err)
			count := pooltest.Counting(t, def)
			p, err := mempool.New(count, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))...)
			require.NoError(t, err)
			k := kernel(t, q, offByOne, "upto")
			const n = 300
			var kept *cl.Buffer
			for i := range 6 {
				b, err := p.Allocate(4 * n)
				require.NoError(t, err)
				runUpto(t, q, k, b, n-1+i%2)
				require.NoError(t, q.Finish())
				if i == 5 {
					kept = b.Buffer()
				}
				require.NoError(t, b.Close())
			}
			require.NoError(t, q.WriteBuffer(kept, 4, []byte{1}))
			require.NoError(t, p.Close())
			got := p.Findings()
			require.Len(t, got, 4, "%v", got)
			for _, f := range got[:3] {
				assert.Equal(t, mempool.OutOfBounds, f.Kind)
				assert.Equal(t, int64(4*n), f.Offset)
			}
			assert.Equal(t, mempool.WriteAfterClose, got[3].Kind)
			assert.Equal(t, int64(4), got[3].Offset)
		})
	}
}

func TestSanitizerSVM(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSVMFixture(t, false, nil, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))...)
			k := kernel(t, f.q, offByOne, "upto")
			const n = 1000
			b, err := f.pool.Allocate(4 * n)
			require.NoError(t, err)
			runUpto(t, f.q, k, b, n)
			require.NoError(t, b.Close())
			c, err := f.pool.Allocate(4 * n)
			require.NoError(t, err)
			svm, off := c.SVM(), c.Offset()
			runUpto(t, f.q, k, c, n-1)
			require.NoError(t, c.Close())
			require.NoError(t, f.q.WriteSVM(svm, off+12, []byte{1, 2}))
			got := f.pool.Findings()
			require.Len(t, got, 2, "%v", got)
			assert.Equal(t, mempool.OutOfBounds, got[0].Kind)
			assert.Equal(t, int64(4*n), got[0].Offset)
			assert.Equal(t, mempool.WriteAfterClose, got[1].Kind)
			assert.Equal(t, int64(12), got[1].Offset)
		})
	}
}

func TestSanitizerEnvironment(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)

	t.Setenv(mempool.SanitizeEnv, "1")
	p := pooltest.New(t, q, mempool.WithSanitizerOutput(nil))
	k := kernel(t, q, offByOne, "upto")
	b, err := p.Allocate(40)
	require.NoError(t, err)
	runUpto(t, q, k, b, 10)
	require.NoError(t, b.Close())
	got := p.Findings()
	require.Len(t, got, 1)
	assert.Equal(t, mempool.OutOfBounds, got[0].Kind)

	t.Setenv(mempool.SanitizeEnv, "yes please")
	_, err = mempool.New(imm)
	assert.ErrorContains(t, err, mempool.SanitizeEnv)

	// WithoutSanitizer does not read the variable, even one New refuses,
	// and of it and WithSanitizer the last given wins.
	plain, err := mempool.New(imm, mempool.WithoutSanitizer())
	require.NoError(t, err)
	require.NoError(t, plain.Close())
	t.Setenv(mempool.SanitizeEnv, "1")
	for name, tc := range map[string]struct {
		opts     []mempool.Option
		findings int
	}{
		"WithoutSanitizer":                {[]mempool.Option{mempool.WithoutSanitizer()}, 0},
		"WithSanitizer, WithoutSanitizer": {[]mempool.Option{mempool.WithSanitizer(), mempool.WithoutSanitizer()}, 0},
		"WithoutSanitizer, WithSanitizer": {[]mempool.Option{mempool.WithoutSanitizer(), mempool.WithSanitizer()}, 1},
	} {
		p := pooltest.New(t, q, append(tc.opts, mempool.WithSanitizerOutput(nil))...)
		b, err := p.Allocate(40)
		require.NoError(t, err)
		runUpto(t, q, k, b, 10)
		require.NoError(t, b.Close())
		assert.Len(t, p.Findings(), tc.findings, name)
	}

	t.Setenv(mempool.SanitizeEnv, "0")
	off, err := mempool.New(imm)
	require.NoError(t, err)
	assert.Nil(t, off.Findings(), "no sanitizer: no findings")
	require.NoError(t, off.Close())
}

// TestSanitizerStats checks that blocks in quarantine count as held, not
// active, in every figure, and that a limit's out-of-memory ladder takes
// them back.
func TestSanitizerStats(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			a, err := f.pool.Allocate(5000)
			require.NoError(t, err)
			b, err := f.pool.Allocate(5000)
			require.NoError(t, err)
			before := f.pool.Stats()
			require.NoError(t, a.Close())
			s := f.pool.Stats()
			pooltest.CheckStats(t, s)
			assert.Equal(t, 1, s.ActiveBlocks)
			assert.Equal(t, int64(5000), s.ActiveBytes)
			assert.Equal(t, before.HeldBlocks+1, s.HeldBlocks, "the block in quarantine is held")
			assert.Equal(t, before.HeldBytes+before.AllocatedBytes.All.Current/2, s.HeldBytes)
			states := map[string]int{}
			for _, seg := range f.pool.Snapshot().Segments {
				for _, blk := range seg.Blocks {
					states[blk.State]++
				}
			}
			assert.Equal(t, 1, states[mempool.StateActive])
			require.NoError(t, b.Close())
			pooltest.CheckStats(t, f.pool.Stats())
			require.NoError(t, f.pool.FreeHeld())
			assert.Zero(t, f.pool.Stats().ManagedBytes, "FreeHeld takes the quarantine back and frees it")
			assert.Empty(t, f.pool.Findings())
		})
	}
}

func TestSanitizerUnderALimit(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, append(pol.opts, mempool.WithLimit(6<<20))...)
			for range cltest.Size(f.q, 8, 40) {
				b, err := f.pool.Allocate(2 << 20)
				require.NoError(t, err, "the ladder takes the quarantine back before it refuses")
				require.NoError(t, b.Close())
			}
			assert.Empty(t, f.pool.Findings())
		})
	}
}

// TestSanitizerCorrectUseHasNoFindings runs arrays (views included) and
// raw kernels, correct ones, on several queues of both policies, blocks
// moving between the queues, and checks that nothing is reported.
func TestSanitizerCorrectUseHasNoFindings(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			q2 := cltest.SecondQueue(t, q, 0)
			ooo := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
			out := &syncBuffer{}
			p := pooltest.New(t, q, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))...)
			k := kernel(t, q, offByOne, "upto")
			rng := rand.New(rand.NewPCG(1, 2))
			queues := []*cl.CommandQueue{q, q2}
			type live struct {
				a    *array.Array[float32]
				v    float32
				view bool
			}
			var arrays [2][]live
			steps := cltest.Size(q, 150, 1500)
			for range steps {
				qi := rng.IntN(2)
				on := p.On(queues[qi])
				switch r := rng.IntN(10); {
				case r < 4 || len(arrays[qi]) == 0: // a new array
					n := 1 + rng.IntN(3000)
					v := float32(rng.IntN(100))
					a, err := array.Full(queues[qi], n, v, on.Allocate)
					require.NoError(t, err)
					arrays[qi] = append(arrays[qi], live{a: a, v: v})
				case r < 6: // an operation on an array or a view
					l := arrays[qi][rng.IntN(len(arrays[qi]))]
					x := l.a
					if x.Len() > 2 && rng.IntN(2) == 0 {
						lo := rng.IntN(x.Len() / 2)
						view, err := x.Slice(lo, lo+1+rng.IntN(x.Len()-lo-1))
						require.NoError(t, err)
						arrays[qi] = append(arrays[qi], live{a: view, v: l.v, view: true})
						x = view
					}
					y, err := array.Axpy(2, x, x)
					require.NoError(t, err)
					sum, err := array.Sum(y)
					require.NoError(t, err)
					assert.InDelta(t, float64(3*l.v)*float64(x.Len()), float64(sum), 1e-3*float64(3*l.v)*float64(x.Len())+1e-3)
					require.NoError(t, y.Close())
				case r < 8: // close one
					i := rng.IntN(len(arrays[qi]))
					require.NoError(t, arrays[qi][i].a.Close())
					arrays[qi] = append(arrays[qi][:i], arrays[qi][i+1:]...)
				case r < 9: // a raw block used on the other queue too
					n := 1 + rng.IntN(5000)
					b, err := on.Allocate(int64(4 * n))
					require.NoError(t, err)
					other := queues[1-qi]
					require.NoError(t, b.RecordQueue(other))
					// other comes after the block's handover to its queue
					// (the user's to order: the pool orders its queue only).
					after(t, other, queues[qi])
					runUpto(t, other, k, b, n-1)
					require.NoError(t, other.Flush())
					runUpto(t, queues[qi], k, b, n-1)
					require.NoError(t, b.Close())
				default: // a raw block on the out-of-order queue
					n := 1 + rng.IntN(5000)
					b, err := p.On(ooo).Allocate(int64(4 * n))
					require.NoError(t, err)
					runUpto(t, ooo, k, b, n-1)
					require.NoError(t, b.Close())
				}
			}
			for _, as := range arrays {
				for _, l := range as {
					require.NoError(t, l.a.Close())
				}
			}
			assert.Empty(t, p.Findings())
			require.NoError(t, p.Close())
			assert.Empty(t, p.Findings())
			assert.Empty(t, out.String())
		})
	}
}

// TestSanitizerConcurrent allocates, uses and closes on several
// goroutines, each on a queue of its own, with the race detector.
func TestSanitizerConcurrent(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			var queues []*cl.CommandQueue
			for range 3 {
				queues = append(queues, cltest.SecondQueue(t, q, 0))
			}
			p := pooltest.New(t, q, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))...)
			stop := pooltest.ReadStats(t, p, nil)
			var wg sync.WaitGroup
			for i, qi := range queues {
				wg.Go(func() {
					on := p.On(qi)
					rng := rand.New(rand.NewPCG(uint64(i), 3))
					for range cltest.Size(q, 30, 200) {
						a, err := array.Full(qi, 1+rng.IntN(2000), float32(1), on.Allocate)
						if !assert.NoError(t, err) {
							return
						}
						b, err := array.Scale(2, a)
						if !assert.NoError(t, err) {
							return
						}
						assert.NoError(t, a.Close())
						assert.NoError(t, b.Close())
					}
				})
			}
			wg.Wait()
			stop()
			assert.Empty(t, p.Findings())
		})
	}
}

// after makes q wait for the commands enqueued on q2 so far.
func after(t *testing.T, q, q2 *cl.CommandQueue) {
	t.Helper()
	m, err := q2.EnqueueMarker()
	require.NoError(t, err)
	require.NoError(t, q2.Flush())
	require.NoError(t, q.EnqueueBarrier(m))
	require.NoError(t, m.Release())
}

// BenchmarkSanitizerHit is BenchmarkPoolHit with the sanitizer on: each
// Allocate+Close of 4 KiB takes the caller's stack, fills the guard,
// checks it, poisons the block, and checks the poison of the block it
// pushes out of the quarantine (a hit once the quarantine is full).
func BenchmarkSanitizerHit(b *testing.B) {
	hitLoop(b, benchPool(b, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)))
}

// BenchmarkSanitizerArenaHit is the same with WithArena.
func BenchmarkSanitizerArenaHit(b *testing.B) {
	hitLoop(b, benchPool(b, mempool.WithArena(), mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)))
}

// TestSanitizerSVMArrays runs arrays over a sanitized SVM pool, views
// included: they work unchanged, and nothing is reported.
func TestSanitizerSVMArrays(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSVMFixture(t, false, nil, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))...)
			x, err := array.Arange(f.q, 1000, float32(0), 1, f.pool.Allocate)
			require.NoError(t, err)
			v, err := x.Slice(10, 510)
			require.NoError(t, err)
			y, err := array.Scale(2, v)
			require.NoError(t, err)
			got, err := y.Get()
			require.NoError(t, err)
			assert.Equal(t, float32(20), got[0])
			assert.Equal(t, float32(2*509), got[499])
			for _, a := range []*array.Array[float32]{y, v, x} {
				require.NoError(t, a.Close())
			}
			assert.Empty(t, f.pool.Findings())
		})
	}
}
