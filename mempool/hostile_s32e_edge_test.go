package mempool_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillTo allocates from p (over nilBuffers) until its managed bytes are
// exactly target, in requests of at most 2^60 bytes, and returns them.
func fillTo(t *testing.T, p *mempool.Pool, target int64) []*mempool.PooledBuffer {
	var bs []*mempool.PooledBuffer
	for {
		m := p.Stats().ManagedBytes
		if m == target {
			return bs
		}
		require.Less(t, m, target)
		n := min(target-m, int64(1)<<60)
		b, err := p.Allocate(n)
		require.NoError(t, err, "filling: managed %d, asking %d", m, n)
		bs = append(bs, b)
	}
}

// FAILED on 62b8031: the package doc (doc.go): "An arena's segment larger than the
// room the limit leaves shrinks to the room, if the request fits." With
// a limit of 2^62 it does; with WithLimit(math.MaxInt64) the new check
// for the pool's sums (core.reserve) refuses the segment before it can
// shrink, though the room it shrinks to always fits an int64 (room <=
// MaxInt64-reserved): the request goes down the out-of-memory ladder
// (OOMRetries) and gets a segment of its own size instead.
func TestHostileS32eArenaShrinkAtMaxLimit(t *testing.T) {
	const room = int64(1) << 27 // under the arena's largest growth segment
	for _, limit := range []int64{1 << 62, math.MaxInt64} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			p, err := mempool.New(nilBuffers{}, mempool.WithArena(), mempool.WithLimit(limit), mempool.WithDropSafety(false))
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close()) }()
			target := (limit - room) &^ (1<<20 - 1)
			bs := fillTo(t, p, target)
			defer func() {
				for _, b := range bs {
					require.NoError(t, b.Close())
				}
			}()
			s0 := p.Stats()
			b, err := p.Allocate(1 << 20)
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close()) }()
			s := p.Stats()
			t.Logf("limit %d: new segment %d bytes, OOMRetries %d", limit, s.ManagedBytes-s0.ManagedBytes, s.OOMRetries-s0.OOMRetries)
			left := limit - target
			seg := s.ManagedBytes - s0.ManagedBytes
			assert.True(t, seg <= left && seg > left-1<<20, "the new segment (%d bytes): the room the limit leaves (%d bytes), to the arena's unit", seg, left)
			assert.Equal(t, s0.OOMRetries, s.OOMRetries, "no refusal: the segment shrinks")
		})
	}
}

// PASSES (exploration): two goroutines ask a pool over no device, with no
// limit, for 2^60-byte blocks until each is refused: 7 of them fit under
// math.MaxInt64 managed bytes, whichever goroutine got them; every
// refusal is an *OutOfMemoryError saying the pool cannot count more
// (Err nil, Limit 0), counted once in OOMs and Misses; nothing is
// negative; Close gives it all back.
func TestHostileS32eConcurrentNearMaxInt64(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprint("arena=", arena), func(t *testing.T) {
			opts := []mempool.Option{mempool.WithDropSafety(false)}
			if arena {
				opts = append(opts, mempool.WithArena())
			}
			p, err := mempool.New(nilBuffers{}, opts...)
			require.NoError(t, err)
			type res struct {
				bs   []*mempool.PooledBuffer
				errs []error
			}
			out := make(chan res, 2)
			for range 2 {
				go func() {
					var r res
					for len(r.errs) < 2 {
						b, err := p.Allocate(1 << 60)
						if err != nil {
							r.errs = append(r.errs, err)
							continue
						}
						r.bs = append(r.bs, b)
					}
					out <- r
				}()
			}
			var bs []*mempool.PooledBuffer
			var errs []error
			for range 2 {
				r := <-out
				bs, errs = append(bs, r.bs...), append(errs, r.errs...)
			}
			assert.Len(t, bs, 7)
			s := p.Stats()
			for _, err := range errs {
				var oom *mempool.OutOfMemoryError
				require.ErrorAs(t, err, &oom)
				assert.Nil(t, oom.Err)
				assert.Zero(t, oom.Limit)
				assert.Contains(t, err.Error(), "over the most bytes the pool can count")
				// At most the end's: the other goroutine's last segment may
				// have been in flight (reserved, not yet managed) then.
				assert.LessOrEqual(t, oom.ManagedBytes, s.ManagedBytes)
				assert.Greater(t, oom.ManagedBytes, int64(0))
			}
			assert.Equal(t, int64(len(errs)), s.OOMs)
			assert.Equal(t, int64(len(bs)+len(errs)), s.Misses)
			assert.Zero(t, s.Hits)
			assert.Zero(t, s.ManagedBytes%7, "7 segments of one size (a bin's, or 2^60)")
			assert.Greater(t, s.ManagedBytes, int64(0))
			assert.Equal(t, s.ManagedBytes, s.PeakManagedBytes)
			assert.Equal(t, int64(7)<<60, s.ActiveBytes)
			assert.Equal(t, int64(7), s.DeviceAllocs)
			for _, b := range bs {
				require.NoError(t, b.Close())
			}
			// Held now: a request of another size frees held segments to
			// make room to count (rung 3), and is served.
			b, err := p.Allocate(3 << 58)
			require.NoError(t, err)
			s2 := p.Stats()
			t.Logf("after the 3<<58 request: managed %d, device frees %d, retries %d, OOMs %d", s2.ManagedBytes, s2.DeviceFrees, s2.OOMRetries-s.OOMRetries, s2.OOMs)
			assert.Equal(t, s.OOMs, s2.OOMs)
			assert.GreaterOrEqual(t, s2.ManagedBytes, int64(0))
			require.NoError(t, b.Close())
			require.NoError(t, p.Close())
			s3 := p.Stats()
			assert.Zero(t, s3.ManagedBytes)
			assert.Equal(t, s3.DeviceAllocs, s3.DeviceFrees)
		})
	}
}
