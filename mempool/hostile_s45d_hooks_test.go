package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingHook is a comparable hook (a struct value) that counts
// malloc_after events in a shared counter.
type countingHook struct{ n *int }

func (h countingHook) Handle(e mempool.Event) {
	if e.Kind == mempool.MallocAfter {
		*h.n++
	}
}

// The same hook added twice (a program that registers its recorder where
// it makes the pool and again where it starts tracing) was told each
// event twice, and memhooks' recorders then counted every allocation
// twice and every free once (review s45d). Now it is one registration,
// told once, that stays until each of its remove functions was called; a
// remove function called twice takes one add back, not two.
func TestHostileS45dSameHookAddedTwiceIsToldOnce(t *testing.T) {
	p, err := mempool.New(noDevice{})
	require.NoError(t, err)
	allocate := func() {
		b, err := p.Allocate(64)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	for _, tc := range []struct {
		name string
		hook func(n *int) mempool.Hook
	}{
		{"pointer", func(n *int) mempool.Hook { return &recorder{} }}, // added twice below
		{"value", func(n *int) mempool.Hook { return countingHook{n} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			h := tc.hook(&n)
			if r, ok := h.(*recorder); ok {
				// The same pointer twice.
				mallocs := func() int { return countKind(r.take(), mempool.MallocAfter) }
				remove1, remove2 := p.AddHook(r), p.AddHook(r)
				allocate()
				assert.Equal(t, 1, mallocs(), "one malloc_after for one Allocate")
				remove1()
				remove1() // a second call takes back nothing
				allocate()
				assert.Equal(t, 1, mallocs(), "still registered, once, after one of its two removes")
				remove2()
				allocate()
				assert.Zero(t, mallocs(), "removed after both")
				return
			}
			remove1, remove2 := p.AddHook(h), p.AddHook(tc.hook(&n)) // an equal value
			allocate()
			assert.Equal(t, 1, n, "an equal comparable hook is one registration")
			remove1()
			allocate()
			assert.Equal(t, 2, n)
			remove2()
			allocate()
			assert.Equal(t, 2, n, "removed after both")
		})
	}
}

// countKind returns how many of events are of kind k.
func countKind(events []mempool.Event, k mempool.EventKind) int {
	n := 0
	for _, e := range events {
		if e.Kind == k {
			n++
		}
	}
	return n
}
