package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AddHook accepted a nil Hook (or a nil HookFunc) without a word, and
// from then on every Allocate of the pool failed with a *PanicError until
// the returned remove was called (review s44a). A nil hook is a
// programmer's error AddHook has no error to return for: it panics at
// the call, as http.Handle's nil handler does, and registers nothing.
// Review s44b found the first fix caught only a nil interface and a nil
// func, where the usual nil hook in Go is a nil pointer of a hook type
// (`var rec *memhooks.TraceRecorder; ... pool.AddHook(rec)`), and
// memhooks' hooks dereference their receiver in Handle.
//
// hooks.go, AddHook: "A nil h panics here, as http.Handle's nil handler
// does: a nil interface, a nil HookFunc, or a nil pointer".
func TestHostileS44aAddHookNilPanicsAndRegistersNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    mempool.Hook
	}{
		{"nil interface", nil},
		{"nil HookFunc", mempool.HookFunc(nil)},
		{"nil *memhooks.LineProfile", (*memhooks.LineProfile)(nil)},
		{"nil *memhooks.TraceRecorder", (*memhooks.TraceRecorder)(nil)},
		{"nil *memhooks.History", (*memhooks.History)(nil)},
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
