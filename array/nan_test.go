package array_test

import (
	"math"
	"testing"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 12, item 9: Max and Min propagate NaN, as numpy's max and min do:
// any NaN makes the result NaN. (An all-NaN array gave -Inf and +Inf,
// values not in the array; OpenCL's max and min leave NaN undefined.)
func TestMaxMinPropagateNaN(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	// long spans several work-groups of the first stage and several
	// elements per work-item.
	long := cltest.Size(q, 300, 20_000)
	t.Run("float32", func(t *testing.T) { checkNaN[float32](t, q, pool, long) })
	t.Run("float64", func(t *testing.T) { checkNaN[float64](t, q, pool, long) })
}

func checkNaN[T float32 | float64](t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, long int) {
	nan, inf := T(math.NaN()), T(math.Inf(1))
	ramp := func(n int, nanAt ...int) []T {
		xs := make([]T, n)
		for i := range xs {
			xs[i] = T(i%101) - 50
		}
		for _, i := range nanAt {
			xs[i] = nan
		}
		return xs
	}
	isNaN := func(v T) bool { return v != v }
	for _, c := range []struct {
		name     string
		xs       []T
		max, min T // NaN: NaN
	}{
		{"all NaN", []T{nan, nan, nan}, nan, nan},
		{"one NaN", []T{nan}, nan, nan},
		{"NaN first", []T{nan, 1, 2}, nan, nan},
		{"NaN last", []T{1, 2, nan}, nan, nan},
		{"NaN among infinities", []T{-inf, nan, inf}, nan, nan},
		{"NaN deep in a long array", ramp(long, long/2+1), nan, nan},
		{"NaN at the end of a long array", ramp(long, long-1), nan, nan},
		{"no NaN: a long array", ramp(long), 50, -50},
		{"no NaN: infinities are values", []T{-inf, -inf}, -inf, -inf},
		{"no NaN: +Inf alone", []T{inf}, inf, inf},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, err := array.FromHost(q, c.xs, pool.Allocate)
			require.NoError(t, err)
			defer x.Close()
			for _, r := range []struct {
				name string
				f    func(*array.Array[T]) (T, error)
				want T
			}{{"Max", array.Max[T], c.max}, {"Min", array.Min[T], c.min}} {
				got, err := r.f(x)
				require.NoError(t, err)
				if isNaN(r.want) {
					assert.True(t, isNaN(got), "%s = %v, want NaN", r.name, got)
				} else {
					assert.Equal(t, r.want, got, r.name)
				}
			}
		})
	}
}
