package array_test

import (
	"strings"
	"testing"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 12, item 13: an error names the call that failed (IAdd, not the
// kernel "add") and the failing operand, says "array:" once, and still
// matches its sentinel.
func TestErrorMessages(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	mk := func(n int) *array.Array[float32] {
		a, err := array.Arange[float32](q, n, 0, 1, pool.Allocate)
		require.NoError(t, err)
		t.Cleanup(func() { a.Close() })
		return a
	}
	x, y, long := mk(10), mk(10), mk(11)
	closed := mk(10)
	require.NoError(t, closed.Close())
	a, err := long.Slice(0, 5)
	require.NoError(t, err)
	defer a.Close()
	shifted, err := long.Slice(2, 7)
	require.NoError(t, err)
	defer shifted.Close()
	empty := mk(0)

	for _, c := range []struct {
		call     func() error
		sentinel error
		want     string
	}{
		{func() error { _, err := array.Add(x, long); return err }, array.ErrLengthMismatch,
			"array: Add: y has 11 elements, x has 10: lengths differ"},
		{func() error { _, err := array.Sub(long, x); return err }, array.ErrLengthMismatch,
			"array: Sub: y has 10 elements, x has 11: lengths differ"},
		{func() error { return x.IAdd(long) }, array.ErrLengthMismatch,
			"array: IAdd: y has 11 elements, x has 10: lengths differ"},
		{func() error { return x.IMul(closed) }, array.ErrClosed, "array: IMul: y: array is closed"},
		{func() error { return closed.IDiv(x) }, array.ErrClosed, "array: IDiv: x: array is closed"},
		{func() error { return y.IAxpy(2, long) }, array.ErrLengthMismatch,
			"array: IAxpy: x has 11 elements, y has 10: lengths differ"},
		{func() error { _, err := array.Axpy(2, x, closed); return err }, array.ErrClosed, "array: Axpy: y: array is closed"},
		{func() error { _, err := array.Dot(closed, x); return err }, array.ErrClosed, "array: Dot: x: array is closed"},
		{func() error { _, err := array.Sum(closed); return err }, array.ErrClosed, "array: Sum: array is closed"},
		{func() error { _, err := array.Max(empty); return err }, array.ErrEmpty, "array: Max: empty array"},
		{func() error { _, err := array.Min(empty); return err }, array.ErrEmpty, "array: Min: empty array"},
		{func() error { return a.IAdd(shifted) }, array.ErrOverlap,
			"array: IAdd: x is [0:5] and y is [2:7] of the same memory: an in-place result overlaps an operand at another offset"},
		{func() error { return closed.Fill(1) }, array.ErrClosed, "array: Fill: array is closed"},
		{func() error { _, err := closed.Get(); return err }, array.ErrClosed, "array: Get: array is closed"},
		{func() error { _, err := closed.Copy(); return err }, array.ErrClosed, "array: Copy: array is closed"},
		{func() error { return closed.Close() }, array.ErrClosed, "array: Close: array is closed"},
		{func() error { _, err := x.Slice(3, 2); return err }, array.ErrOutOfRange,
			"array: Slice: [3:2] of 10 elements: slice bounds out of range"},
	} {
		err := c.call()
		require.Error(t, err, c.want)
		assert.ErrorIs(t, err, c.sentinel, c.want)
		assert.Equal(t, c.want, err.Error())
		assert.Equal(t, 1, strings.Count(err.Error(), "array"+":"), "one prefix: %s", err)
	}
}

// Issue 12, item 6: a nil array, wherever a call takes one, is an error
// that names the operand (ErrNilArray), and a nil queue one that matches
// cl.ErrInvalidCommandQueue; neither panics. Accessors of a nil array
// return zero values.
func TestNilArraysAndQueuesAreErrors(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	x, err := array.Zeros[float32](q, 4, pool.Allocate)
	require.NoError(t, err)
	defer x.Close()
	var null *array.Array[float32]
	value := func(_ any, err error) error { return err }

	for _, c := range []struct {
		want string
		call func() error
	}{
		{"array: Add: y: nil array", func() error { return value(array.Add(x, nil)) }},
		{"array: Add: x: nil array", func() error { return value(array.Add(nil, x)) }},
		{"array: Sub: y: nil array", func() error { return value(array.Sub(x, nil)) }},
		{"array: Mul: x: nil array", func() error { return value(array.Mul(nil, x)) }},
		{"array: Div: y: nil array", func() error { return value(array.Div(x, nil)) }},
		{"array: Scale: nil array", func() error { return value(array.Scale(2, null)) }},
		{"array: Axpy: x: nil array", func() error { return value(array.Axpy(2, nil, x)) }},
		{"array: Axpy: y: nil array", func() error { return value(array.Axpy(2, x, nil)) }},
		{"array: Tridiag: nil array", func() error { return value(array.Tridiag(1, 2, 1, null)) }},
		{"array: Sum: nil array", func() error { return value(array.Sum(null)) }},
		{"array: Dot: y: nil array", func() error { return value(array.Dot(x, nil)) }},
		{"array: Max: nil array", func() error { return value(array.Max(null)) }},
		{"array: Min: nil array", func() error { return value(array.Min(null)) }},
		{"array: IAdd: y: nil array", func() error { return x.IAdd(nil) }},
		{"array: IAdd: x: nil array", func() error { return null.IAdd(x) }},
		{"array: ISub: y: nil array", func() error { return x.ISub(nil) }},
		{"array: IMul: y: nil array", func() error { return x.IMul(nil) }},
		{"array: IDiv: x: nil array", func() error { return null.IDiv(x) }},
		{"array: IScale: nil array", func() error { return null.IScale(2) }},
		{"array: IAxpy: x: nil array", func() error { return x.IAxpy(2, nil) }},
		{"array: IAxpy: y: nil array", func() error { return null.IAxpy(2, x) }},
		{"array: Fill: nil array", func() error { return null.Fill(1) }},
		{"array: Get: nil array", func() error { return value(null.Get()) }},
		{"array: Copy: nil array", func() error { return value(null.Copy()) }},
		{"array: Slice: nil array", func() error { return value(null.Slice(0, 0)) }},
		{"array: Close: nil array", func() error { return null.Close() }},
	} {
		var err error
		require.NotPanics(t, func() { err = c.call() }, c.want)
		assert.ErrorIs(t, err, array.ErrNilArray, c.want)
		assert.EqualError(t, err, c.want)
	}

	assert.NotPanics(t, func() {
		assert.Zero(t, null.Len())
		assert.Zero(t, null.Offset())
		assert.Nil(t, null.Buffer())
		assert.Nil(t, null.Queue())
		assert.Nil(t, null.Allocator())
		assert.False(t, null.Closed())
	}, "accessors")

	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Empty", func() error { return value(array.Empty[float32](nil, 4, pool.Allocate)) }},
		{"Zeros", func() error { return value(array.Zeros[float32](nil, 4, pool.Allocate)) }},
		{"Full", func() error { return value(array.Full[int32](nil, 4, 1, pool.Allocate)) }},
		{"Arange", func() error { return value(array.Arange[float64](nil, 4, 0, 1, pool.Allocate)) }},
		{"FromHost", func() error { return value(array.FromHost(nil, []float32{1, 2}, pool.Allocate)) }},
		{"Zeros", func() error { return value(array.Zeros[float32](nil, 0, array.Alloc(nil))) }}, // no memory, no allocator: still a queue
	} {
		var err error
		require.NotPanics(t, func() { err = c.call() }, c.name)
		assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue, c.name)
		assert.ErrorContains(t, err, "array: "+c.name+": nil queue")
	}
	assert.Equal(t, 1, pool.ActiveBlocks(), "x alone: nothing was allocated for the refused calls")
}
