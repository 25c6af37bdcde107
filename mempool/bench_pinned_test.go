package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// BenchmarkPinnedPoolHit is a warm Allocate+Close of 4 KiB in a pool over
// pinned memory, with no command in between: each reuse hands the block
// to the host, which checks first that the commands enqueued before its
// Close have completed.
func BenchmarkPinnedPoolHit(b *testing.B) {
	q := cltest.Queue(b)
	pinned, err := allocator.NewPinned(q)
	if err != nil {
		b.Fatal(err)
	}
	p, err := mempool.New(pinned)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	hitLoop(b, p)
}
