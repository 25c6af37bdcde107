package array_test

import (
	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// PASSES (exploration). doc.go, "Lifetimes": "Arrays over a pool that
// are dropped without Close come back after garbage collection, as
// pooled buffers do". Arrays, results of operations on them, and views
// (of buffers of exact bins and of an arena) are dropped unclosed: after
// a few collections the pool has no block active.
func TestHostileS33CDroppedArraysComeBack(t *testing.T) {
	q := cltest.Queue(t)
	for name, opts := range map[string][]mempool.Option{"bins": nil, "arena": {mempool.WithArena()}} {
		t.Run(name, func(t *testing.T) {
			pool := pooltest.New(t, q, opts...)
			func() {
				x, err := array.Arange[float32](q, 1000, 0, 1, pool.Allocate)
				require.NoError(t, err)
				y, err := array.Scale(2, x)
				require.NoError(t, err)
				v, err := y.Slice(3, 10)
				require.NoError(t, err)
				_, err = array.Sum(v)
				require.NoError(t, err)
				z, err := array.Add(x, y)
				require.NoError(t, err)
				_ = z
			}()
			require.NoError(t, q.Finish())
			deadline := time.Now().Add(5 * time.Second)
			for pool.ActiveBlocks() > 0 && time.Now().Before(deadline) {
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
			require.Zero(t, pool.ActiveBlocks(), "dropped arrays came back to the pool")
		})
	}
}

// s33cExtremes checks Sum, Max, Min, Dot of vals (exact types) against
// the host, at the given view offset into a larger array of filler.
func s33cExtremes[T int32 | int64 | uint32](t *testing.T, q *cl.CommandQueue, vals []T, filler T, off int) {
	t.Helper()
	host := make([]T, off+len(vals)+7)
	for i := range host {
		host[i] = filler
	}
	copy(host[off:], vals)
	base, err := array.FromHost(q, host, array.Alloc(nil))
	require.NoError(t, err)
	x, err := base.Slice(off, off+len(vals))
	require.NoError(t, err)
	require.NoError(t, base.Close())
	defer x.Close()
	var sum, dot T
	hi, lo := vals[0], vals[0]
	for _, v := range vals {
		sum += v
		dot += v * v
		hi, lo = max(hi, v), min(lo, v)
	}
	got, err := array.Sum(x)
	require.NoError(t, err)
	assert.Equal(t, sum, got, "Sum n=%d", len(vals))
	got, err = array.Dot(x, x)
	require.NoError(t, err)
	assert.Equal(t, dot, got, "Dot n=%d", len(vals))
	got, err = array.Max(x)
	require.NoError(t, err)
	assert.Equal(t, hi, got, "Max n=%d", len(vals))
	got, err = array.Min(x)
	require.NoError(t, err)
	assert.Equal(t, lo, got, "Min n=%d", len(vals))
}

// PASSES (exploration). Reductions of integers at their limits, wrapping
// sums, lengths around the reductions' 64x64 work-items, in views whose
// neighbours hold the opposite extreme.
func TestHostileS33CIntegerExtremes(t *testing.T) {
	q := cltest.Queue(t)
	for _, n := range []int{1, 2, 63, 64, 65, 4095, 4096, 4097, 8191, 8257} {
		i32 := make([]int32, n)
		i64 := make([]int64, n)
		u32 := make([]uint32, n)
		for i := range n {
			i32[i] = int32(uint32(i) * 2654435761)
			i64[i] = int64(uint64(i) * 0x9E3779B97F4A7C15)
			u32[i] = uint32(i)*2654435761 | 1<<31
		}
		i32[n/2], i64[n/2], u32[n-1] = math.MinInt32, math.MinInt64, math.MaxUint32
		s33cExtremes(t, q, i32, math.MaxInt32, 3)
		s33cExtremes(t, q, i64, math.MaxInt64, 1)
		s33cExtremes(t, q, u32, 0, 5)
		// All at the type's least or greatest value.
		for i := range n {
			i32[i], i64[i], u32[i] = math.MinInt32, math.MaxInt64, 0
		}
		s33cExtremes(t, q, i32, 0, 2)
		s33cExtremes(t, q, i64, 0, 2)
		s33cExtremes(t, q, u32, math.MaxUint32, 2)
	}
}

// PASSES (exploration). Float reductions and element-wise ops with
// infinities and signed zeros; Max/Min of all -Inf / +Inf.
func TestHostileS33CFloatEdges(t *testing.T) {
	q := cltest.Queue(t)
	for _, n := range []int{1, 65, 4097} {
		neg := make([]float32, n)
		pos := make([]float64, n)
		for i := range n {
			neg[i] = float32(math.Inf(-1))
			pos[i] = math.Inf(1)
		}
		a, err := array.FromHost(q, neg, array.Alloc(nil))
		require.NoError(t, err)
		m, err := array.Max(a)
		require.NoError(t, err)
		assert.True(t, math.IsInf(float64(m), -1), "Max of all -Inf n=%d: %v", n, m)
		m, err = array.Min(a)
		require.NoError(t, err)
		assert.True(t, math.IsInf(float64(m), -1), "Min of all -Inf n=%d: %v", n, m)
		s, err := array.Sum(a)
		require.NoError(t, err)
		assert.True(t, math.IsInf(float64(s), -1), "Sum n=%d: %v", n, s)
		require.NoError(t, a.Close())
		b, err := array.FromHost(q, pos, array.Alloc(nil))
		require.NoError(t, err)
		mm, err := array.Min(b)
		require.NoError(t, err)
		assert.True(t, math.IsInf(mm, 1), "Min of all +Inf n=%d: %v", n, mm)
		d, err := array.Sub(b, b) // Inf - Inf = NaN
		require.NoError(t, err)
		mm, err = array.Max(d)
		require.NoError(t, err)
		assert.True(t, math.IsNaN(mm), "Max of NaNs n=%d: %v", n, mm)
		require.NoError(t, d.Close())
		require.NoError(t, b.Close())
	}
}
