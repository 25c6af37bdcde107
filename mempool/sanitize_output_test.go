package mempool_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
)

// panicWriter panics at every Write, as a writer of a program with a bug
// does; it counts the calls.
type panicWriter struct{ calls int }

func (w *panicWriter) Write([]byte) (int, error) {
	w.calls++
	panic("writer broke")
}

// TestSanitizerOutputPanicking: a WithSanitizerOutput writer that panics
// does not take the pool down. FAILED on 5d6d567: the panic escaped
// Pool.Close, which reports the open block under the sanitizer's lock, and
// left that lock held, so the next Findings hung.
func TestSanitizerOutputPanicking(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			w := &panicWriter{}
			p := pooltest.New(t, q, append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(w))...)
			open, err := p.Allocate(500)
			require.NoError(t, err)
			other, err := p.Allocate(500)
			require.NoError(t, err)
			require.NotPanics(t, func() { require.NoError(t, p.Close()) })
			done := make(chan []mempool.Finding)
			go func() { done <- p.Findings() }()
			var got []mempool.Finding
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Findings hung after the writer panicked")
			}
			require.Len(t, got, 2, "both open blocks reported: the findings are kept")
			for _, f := range got {
				assert.Equal(t, mempool.LeakedAtClose, f.Kind)
				assert.True(t, strings.Contains(f.AllocSite, "TestSanitizerOutputPanicking"), f.AllocSite)
			}
			assert.Equal(t, 1, w.calls, "after its panic the writer is not called again")
			require.NoError(t, open.Close())
			require.NoError(t, other.Close())
		})
	}
}
