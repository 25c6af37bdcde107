package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s34bBlockSize is what one request of n takes of the limit: its bin's
// size with exact bins; rounded to 4 KiB in an arena (the own segment of
// a request past the growth step).
func s34bBlockSize(arena bool, n int64) int64 {
	if arena {
		return (n + 4095) &^ 4095
	}
	return mempool.AllocSize(mempool.BinNumber(n, 4), 4)
}

// PASSES (port of RMM's pool tests with a maximum size (and of its
// limiting_resource_adaptor's "allocate up to the limit"): a pool whose
// limit is exactly k blocks serves k requests, whatever came before; then
// refuses the next; and, all given back, serves a different pattern.
func TestHostileS34bFillToTheLimit(t *testing.T) {
	for _, v := range s34bVariants() {
		for _, n := range []int64{600 << 10, 1 << 20, 3 << 20} {
			for _, k := range []int{2, 3, 5} {
				t.Run(fmt.Sprintf("%s/%d/%d", v.name, n, k), func(t *testing.T) {
					limit := int64(k) * s34bBlockSize(v.pp.arena, n)
					p, q, _ := peerPool(t, v.pp, nil, mempool.WithLimit(limit))
					alloc := s34bAllocFn(p, q, v.on)
					var bufs []*mempool.PooledBuffer
					defer func() {
						for _, b := range bufs {
							b.Close()
						}
					}()
					for i := 0; i < k; i++ {
						b, err := alloc(n)
						require.NoError(t, err, "request %d of %d bytes, limit %d = %d blocks; managed %d", i, n, limit, k, p.ManagedBytes())
						bufs = append(bufs, b)
					}
					_, err := alloc(n)
					require.ErrorIs(t, err, mempool.ErrOutOfMemory)
					for _, b := range bufs {
						require.NoError(t, b.Close())
					}
					bufs = nil
					// Free then reuse, in another pattern: half-size blocks,
					// 2k of them when they fit.
					h := n / 2
					m := int(limit / s34bBlockSize(v.pp.arena, h))
					for i := 0; i < m; i++ {
						b, err := alloc(h)
						require.NoError(t, err, "second pattern: request %d of %d (%d bytes); managed %d, held %d", i, m, h, p.ManagedBytes(), p.HeldBytes())
						bufs = append(bufs, b)
					}
					for _, b := range bufs {
						require.NoError(t, b.Close())
					}
					bufs = nil
					// And once more the first pattern.
					for i := 0; i < k; i++ {
						b, err := alloc(n)
						require.NoError(t, err, "third pattern: request %d of %d; managed %d, held %d", i, k, p.ManagedBytes(), p.HeldBytes())
						bufs = append(bufs, b)
					}
					assert.LessOrEqual(t, p.ManagedBytes(), limit)
				})
			}
		}
	}
}
