package cl_test

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onReleaseContext returns a context of its own on the selected device,
// released at the end of the test if the test did not release it.
func onReleaseContext(t *testing.T) *cl.Context {
	t.Helper()
	ctx, err := cl.CreateContext(cltest.Queue(t).Device())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ctx.Release() })
	return ctx
}

func TestContextOnReleaseRunsEachFunctionOnceLastFirst(t *testing.T) {
	ctx := onReleaseContext(t)
	var order []int
	for i := range 3 {
		require.NoError(t, ctx.OnRelease(func() { order = append(order, i) }))
	}
	assert.Empty(t, order, "nothing runs before Release")
	require.NoError(t, ctx.Release())
	assert.Equal(t, []int{2, 1, 0}, order)
	require.NoError(t, ctx.Release(), "Release stays idempotent")
	assert.Equal(t, []int{2, 1, 0}, order, "a second Release runs nothing")
}

func TestContextOnReleaseRefusesBadInput(t *testing.T) {
	ctx := onReleaseContext(t)
	assert.ErrorIs(t, ctx.OnRelease(nil), cl.ErrInvalidValue)
	var nilCtx *cl.Context
	assert.ErrorIs(t, nilCtx.OnRelease(func() {}), cl.ErrInvalidContext)
	require.NoError(t, ctx.Release())
	ran := false
	err := ctx.OnRelease(func() { ran = true })
	assert.ErrorIs(t, err, cl.ErrInvalidContext, "a released context registers nothing")
	require.NoError(t, ctx.Release())
	assert.False(t, ran)
}

// A panicking function does not keep the context, or the functions after
// it, from being released: Release returns the panic as an error.
func TestContextOnReleasePanicIsAnError(t *testing.T) {
	ctx := onReleaseContext(t)
	ran := false
	require.NoError(t, ctx.OnRelease(func() { ran = true }))
	require.NoError(t, ctx.OnRelease(func() { panic("boom") }))
	err := ctx.Release()
	require.Error(t, err)
	assert.ErrorContains(t, err, "boom")
	assert.ErrorContains(t, err, "clReleaseContext")
	assert.True(t, ran, "the function registered before the panicking one ran")
	_, err = ctx.BuildProgram("kernel void k(void) {}", "")
	assert.ErrorIs(t, err, cl.ErrInvalidContext, "the context is released")
}

// OnRelease racing Release: each function either runs once (registered
// before the release) or is refused; none is registered and forgotten.
func TestContextOnReleaseRacesRelease(t *testing.T) {
	for range 20 {
		ctx := onReleaseContext(t)
		var (
			mu         sync.Mutex
			ran, added int
			wg         sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for range 50 {
					if ctx.OnRelease(func() { mu.Lock(); ran++; mu.Unlock() }) == nil {
						mu.Lock()
						added++
						mu.Unlock()
					}
				}
			})
		}
		wg.Go(func() { _ = ctx.Release() })
		wg.Wait()
		assert.Equal(t, added, ran)
	}
}
