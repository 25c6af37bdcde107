package mempool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// A miss that the device serves at the first try takes the pool's lock
// at most twice (decide, commit), and a hit of the policy at most once,
// for each policy, on a queue (allocator.Immediate's) and on none
// (allocator.Deferred), with queue caches and without.
func TestMissTakesThePoolsLockAtMostTwice(t *testing.T) {
	q := cltest.Queue(t)
	for _, tc := range []struct {
		name string
		opts []mempool.Option
	}{
		{"bins", nil},
		{"arena", []mempool.Option{mempool.WithArena()}},
		{"bins/uncached", []mempool.Option{mempool.WithoutQueueCaches()}},
		{"arena/uncached", []mempool.Option{mempool.WithArena(), mempool.WithoutQueueCaches()}},
	} {
		for _, queue := range []bool{true, false} {
			name := tc.name + "/no queue"
			def, err := allocator.NewDeferred(q.Context(), 0)
			require.NoError(t, err)
			var a allocator.Allocator = def
			if queue {
				name = tc.name + "/queue"
				imm, err := allocator.NewImmediate(q, 0)
				require.NoError(t, err)
				a = imm
			}
			t.Run(name, func(t *testing.T) {
				p, err := mempool.New(a, tc.opts...)
				require.NoError(t, err)
				defer p.Close()
				locks := mempool.CountLocks(p)
				b, err := p.Allocate(3 << 20) // large: no queue cache keeps it
				require.NoError(t, err)
				assert.LessOrEqual(t, locks.Load(), int64(2), "a miss served at the first try")
				require.NoError(t, b.Close())

				locks.Store(0)
				b, err = p.Allocate(3 << 20)
				require.NoError(t, err)
				assert.LessOrEqual(t, locks.Load(), int64(1), "a hit of the policy")
				require.NoError(t, b.Close())
			})
		}
	}
}
