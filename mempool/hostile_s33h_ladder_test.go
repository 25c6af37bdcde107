package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// FAILED on 51c7217 (fixed: Arenas.AnyFits). TestHostileS33HRungZeroOversizeRetriesInVain: rung 0 retries "if a free
// block holds the request that the placement rules kept from it", but it
// asks LargestFree, which counts wholly free oversize segments, whose
// block GetAnyOn never hands a request that GetWhole declines. An
// oversize segment of 64 MiB, wholly free and kept by BeforeGrow's slack,
// sends a 2 MiB oversize request refused by the limit into a retry that
// cannot succeed: OOMRetries counts it (2 instead of 1: rung 1, which
// frees the kept segment, is the only retry that can help).
func TestHostileS33HRungZeroOversizeRetriesInVain(t *testing.T) {
	const MiB = 1 << 20
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena(), mempool.WithMaxSplitSize(1*MiB), mempool.WithLimit(65*MiB))
	x, err := p.Allocate(64 * MiB)
	require.NoError(t, err)
	require.NoError(t, x.Close())
	s := p.Stats()
	t.Logf("after 64 MiB: managed %d held %d", s.ManagedBytes, s.HeldBytes)
	y, err := p.Allocate(2 * MiB) // oversize; GetWhole declines the 64 MiB segment (past the 20 MiB slack)
	require.NoError(t, err)
	defer y.Close()
	s = p.Stats()
	t.Logf("after 2 MiB: managed %d frees %d oomretries %d ooms %d", s.ManagedBytes, s.DeviceFrees, s.OOMRetries, s.OOMs)
	require.Equal(t, int64(1), s.DeviceFrees, "rung 1 freed the kept 64 MiB segment")
	require.Equal(t, int64(1), s.OOMRetries, "one retry can serve the request (after rung 1 frees the kept segment); rung 0's retry on an oversize segment's block is in vain")
}
