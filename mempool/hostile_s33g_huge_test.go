package mempool_test

import (
	"errors"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FAILED on 3e290d2 (defect; fixed by the ladder's rung 0). TestHostileS33GHugeTailUnderLimitStepRequestOOM: a huge segment (200 MiB, made
// for one request over half the 256 MiB preferred size) holds a 150 MiB
// array and a 50 MiB free tail; the limit is the 200 MiB the pool holds,
// so no segment can be added. Every request of at most the tail must be
// served from it by the out-of-memory ladder's GetAny ("any free block
// that fits serves"), whatever passOver says. A request of exactly the
// growth step fails: passOver (and ownMin) keep GetOn off the tail, the
// limit refuses the step's segment, and as the request's own segment is
// the step's, rung 4 (own) makes no retry and rung 5 sees nothing
// changed: the ladder ends without ever calling GetAnyOn. Passed on
// c81ac60^ (the segment was not own then).
func TestHostileS33GHugeTailUnderLimitStepRequestOOM(t *testing.T) {
	const MiB = 1 << 20
	q := cltest.Queue(t)
	if m := q.Device().MaxMemAllocSize; m > 0 && m < 200*MiB {
		t.Skipf("the device's largest buffer (%d bytes) is under 200 MiB (Oclgrind's)", m)
	}
	p := pooltest.New(t, q, mempool.WithArena(), mempool.WithLimit(200*MiB))
	a, err := p.Allocate(200 * MiB)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	b, err := p.Allocate(150 * MiB)
	require.NoError(t, err)
	defer b.Close()
	s := p.Stats()
	t.Logf("managed %d held %d allocs %d", s.ManagedBytes, s.HeldBytes, s.DeviceAllocs)
	require.Equal(t, int64(1), s.DeviceAllocs, "the 150 MiB array took the huge segment")
	var failed []int64
	for n := int64(64 << 10); n <= 48*MiB; n += 64 << 10 {
		c, err := p.Allocate(n)
		if err != nil {
			if len(failed) == 0 {
				t.Logf("Allocate(%d): %v (ErrOutOfMemory: %v)", n, err, errors.Is(err, mempool.ErrOutOfMemory))
			}
			failed = append(failed, n)
			continue
		}
		require.NoError(t, c.Close())
	}
	if len(failed) > 0 {
		t.Logf("failed sizes: %d (first %d, last %d)", len(failed), failed[0], failed[len(failed)-1])
	}
	assert.Empty(t, failed, "requests the huge segment's 50 MiB free tail serves failed with out-of-memory")
}
