package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On's doc now says "q may be released before the pool (see
// RecordQueue)", and forgetReleased's that "a buffer still open on such a
// queue goes back to the policy ... when closed". With the sanitizer on,
// such a buffer's Close runs its check kernel on the buffer's own queue,
// released: the check fails ("cannot check block ...: CL_INVALID_COMMAND_QUEUE:
// queue is nil or released", and "further failures are not printed"), and
// a write past the block's end, done on that queue before its release, is
// never reported. The sanitizer's doc: Close "a check kernel looks for a
// guard byte that changed (OutOfBounds)"; a queue the pool cannot use
// should be checked on the sanitizer's own queue, as for blocks of an
// allocator without a queue. The subtest "kept" is the control: the same
// write, the queue not released, is found.
func TestHostileS36aSanitizerMissesOverflowOnReleasedQueue(t *testing.T) {
	for _, c := range []struct {
		name            string
		release, forget bool
	}{{"kept", false, false}, {"released", true, false}, {"released+forgotten", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			out := &syncBuffer{}
			f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
			q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
			require.NoError(t, err)
			const size = 4000
			b, err := f.pool.On(q).Allocate(size)
			require.NoError(t, err)
			id := b.ID()
			// x[size/4] = 0: one int past the request, in the guard.
			ev, err := q.EnqueueFillBuffer(b.Base(), []byte{0, 0, 0, 0}, b.Offset()+size, 4)
			require.NoError(t, err)
			require.NoError(t, ev.Release())
			if c.release {
				require.NoError(t, q.Release()) // finishes the fill first
			}
			if c.forget {
				for range 2*mempool.QueueStates(f.pool) + mempool.ForgetMin + 1 {
					useOnce(t, f, 1<<16)
				}
			}
			require.NoError(t, b.Close())
			got := f.pool.Findings()
			if !c.release {
				require.NoError(t, q.Release())
			}
			assert.NotContains(t, out.String(), "cannot check", "the sanitizer could not check the block")
			var found bool
			for _, g := range got {
				found = found || (g.Kind == mempool.OutOfBounds && g.BlockID == id)
			}
			assert.True(t, found, "the write past the block's end was not found: findings %v, output %q", got, out.String())
		})
	}
}
