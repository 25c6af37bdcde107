package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AddHook accepted a nil Hook (or a nil HookFunc) without a word, and
// from then on every Allocate of the pool failed with a *PanicError until
// the returned remove was called (review s44a). A nil hook is a
// programmer's error AddHook has no error to return for: it panics at
// the call, as http.Handle's nil handler does, and registers nothing.
//
// hooks.go, AddHook: "A nil h (or a nil HookFunc) panics here".
func TestHostileS44aAddHookNilPanicsAndRegistersNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    mempool.Hook
	}{
		{"nil interface", nil},
		{"nil HookFunc", mempool.HookFunc(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pooltest.New(t, nil)
			assert.PanicsWithValue(t, "mempool: AddHook of a nil hook", func() { p.AddHook(tc.h) })
			b, err := p.Allocate(4096)
			require.NoError(t, err, "nothing was registered")
			require.NoError(t, b.Close())
		})
	}
}
