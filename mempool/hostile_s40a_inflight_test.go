package mempool_test

// Hostile review s40a: a request that fits the limit (or the device) fails
// with ErrOutOfMemory while another request's segment, which has room for
// both, is being allocated.

import (
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two goroutines start up at once on an arena capped at 512 KiB (its first
// segment's size) by WithLimit, each asking for
// 128 KiB: together a quarter of the cap. The first request reserves the
// 512 KiB segment and is allocating it (slowly: the allocator is gated
// here); the second, made meanwhile, should be served from that segment
// once it lands (the ladder waits for frees in flight for the same reason:
// memory the pool is about to have). Instead it fails at once with an
// OutOfMemoryError that says "0 blocks active ... 0 bytes managed, limit
// 524288: over the pool's limit", for a 131072-byte request.
//
// Doc: package doc, Limits ("segments being allocated count against it");
// Out of memory (the ladder ends in an error only when nothing serves the
// request); OutOfMemoryError is to say "where the memory is" and shows
// none of it.
func TestS40aSecondRequestFailsWhileFirstSegmentInFlight(t *testing.T) {
	for _, by := range []string{"limit"} { // a Budget's refusal races the gate: see TestS40aTwoQueuesWithinLimitNeverOOM
		t.Run(by, func(t *testing.T) {
			g := newGated()
			f := newCappedFixture(t, by, 512<<10, func(a allocator.Allocator) allocator.Allocator { g.Allocator = a; return g }, mempool.WithArena())
			open := g.hold()
			first := make(chan error, 1)
			var a *mempool.PooledBuffer
			go func() {
				var err error
				a, err = f.pool.Allocate(128 << 10)
				first <- err
			}()
			<-g.entered // the first segment is reserved and being allocated
			second := make(chan error, 1)
			var b *mempool.PooledBuffer
			go func() {
				var err error
				b, err = f.pool.Allocate(128 << 10)
				second <- err
			}()
			var early error
			select {
			case early = <-second:
			case <-g.entered: // it asked the allocator too: let it through
			case <-time.After(200 * time.Millisecond): // it waits for the segment in flight
			}
			open()
			require.NoError(t, <-first)
			if early == nil {
				select {
				case early = <-second:
				case <-time.After(hangLimit):
					t.Fatal("the second request never returned")
				}
			}
			assert.NoError(t, early, "a quarter of the cap asked for, with nothing else in the pool")
			require.NoError(t, a.Close())
			if early == nil {
				require.NoError(t, b.Close())
			}
		})
	}
}
