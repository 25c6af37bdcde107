package mempool_test

// Hostile review s40a: combinations. A sanitized arena on an out-of-order
// queue, under a limit, with a kernel that still writes a block when it
// is closed (legal: Close right after the last enqueue).
//
//	OCL_ICD_VENDORS=$PWD/build/icd CLPOOL_DEVICE=pocl \
//	  timeout 300 nice go test -race ./mempool -count=1 -run 'S40a'

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A block closed on an out-of-order queue right after a slow kernel that
// writes it (within its bounds) is enqueued there: the sanitizer's check
// and poison must come after the kernel, so no finding.
func TestS40aSanitizedOutOfOrderCloseMidKernel(t *testing.T) {
	for _, arena := range []bool{false, true} {
		f := newSanFixture(t, policyOptions(arena)...)
		ooo := cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder)
		n := 1024
		k, iters := s35dSlowKernel(t, f.q, n, 300*time.Millisecond)
		on := f.pool.On(ooo)
		for range 3 {
			b, err := on.Allocate(int64(4 * n))
			require.NoError(t, err)
			require.NoError(t, k.SetArgs(b.Base(), b.Offset()/4, int32(7), int32(iters)))
			require.NoError(t, ooo.EnqueueKernel(k, []int{n}, nil))
			require.NoError(t, ooo.Flush())
			require.NoError(t, b.Close())
		}
		var fs []mempool.Finding
		if !within(t, "Findings", func() { fs = f.pool.Findings() }) {
			return
		}
		assert.Empty(t, fs, "arena %v: writes within bounds, enqueued before Close: no finding (out: %s)", arena, f.out.String())
		require.NoError(t, ooo.Finish())
	}
}

// The same, under a limit that leaves room for one block: the next
// request, on an in-order queue, takes the block back from the quarantine
// (the ladder drains it) while the kernel on the out-of-order queue may
// still write it. Its own data must survive, and nothing is reported.
func TestS40aSanitizedOutOfOrderLimitHandover(t *testing.T) {
	for _, arena := range []bool{false, true} {
		n := 64 << 10 // 256 KiB: one fits an arena's first segment, two do not
		limit := int64(512 << 10)
		if !arena {
			limit = binSize(int64(4*n+mempool.SanitizerGuard)) + 4096
		}
		f := newSanFixture(t, append(policyOptions(arena), mempool.WithLimit(limit))...)
		ooo := cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder)
		q2 := cltest.SecondQueue(t, f.q, 0)
		k, iters := s35dSlowKernel(t, f.q, n, 300*time.Millisecond)
		a, err := f.pool.On(ooo).Allocate(int64(4 * n))
		require.NoError(t, err)
		require.NoError(t, k.SetArgs(a.Base(), a.Offset()/4, int32(7), int32(iters)))
		require.NoError(t, ooo.EnqueueKernel(k, []int{n}, nil))
		require.NoError(t, ooo.Flush())
		require.NoError(t, a.Close())

		var b *mempool.PooledBuffer
		if !within(t, "Allocate", func() { b, err = f.pool.On(q2).Allocate(int64(4 * n)) }) {
			return
		}
		require.NoError(t, err, "arena %v", arena)
		ones := allOnes(n)
		require.NoError(t, q2.WriteBuffer(b.Base(), b.Offset(), cl.Bytes(ones)))
		require.NoError(t, ooo.Finish()) // the old kernel is done now, whatever the order
		got := make([]int32, n)
		require.NoError(t, q2.ReadBuffer(b.Base(), b.Offset(), cl.Bytes(got)))
		bad := 0
		for _, v := range got {
			if v != 1 {
				bad++
			}
		}
		assert.Zero(t, bad, "arena %v: the new owner's data was overwritten by the old owner's kernel", arena)
		require.NoError(t, b.Close())
		assert.Empty(t, f.pool.Findings(), "arena %v: %s", arena, f.out.String())
	}
}
