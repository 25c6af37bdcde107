package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AddHook of a nil hook panics at the call and registers nothing
// (hooks.go). The usual nil hook in Go is a nil pointer of a hook type in
// the interface (`var rec *memhooks.TraceRecorder; ... pool.AddHook(rec)`),
// and memhooks' own hooks dereference their receiver in Handle: review
// s44b found 7f2ddc2's check caught only a nil interface and a nil func,
// and such a pointer registered without a word, failing every later
// Allocate with a *PanicError.
func TestHostileS44bAddHookTypedNilPointerPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    mempool.Hook
	}{
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
