package mempool

import (
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// The pool's handles: a segment is memory from the allocator (a device
// buffer or SVM, see mem), a block a byte range of one, handed out or held
// for reuse.
type (
	block   = policy.Block[mem]
	segment = policy.Segment[mem]
)

// placement is what the pool asks of its policy: where a request goes,
// how big a new segment is, and what a block given back becomes. The
// policies (policy.Bins, the default, and policy.Arenas, WithArena) keep
// their own structures and no statistics; the pool calls them under p.mu.
type placement interface {
	// BlockSize returns the bytes of the block that serves size. It
	// reads nothing that changes: the pool calls it without p.mu.
	BlockSize(size int64) int64
	// GetOn takes a free block for size out of the free set, or returns
	// nil; it may prefer blocks that only queue q may still use.
	GetOn(size int64, q int32) *block
	// GetAnyOn is GetOn for a request on the out-of-memory ladder: it
	// may take a block the policy keeps for other requests. AnyFits
	// reports whether it would find one where GetOn found none.
	GetAnyOn(size int64, q int32) *block
	AnyFits(size int64) bool
	// Fits reports whether GetAnyOn would find a block now.
	Fits(size int64) bool
	// NewSegment returns the segment, not yet allocated, that a miss of
	// size makes (the pool's ladder may try a segment of BlockSize(size)
	// bytes instead, with the same marks).
	NewSegment(size int64) *segment
	// BeforeGrow returns, removed, the segments to free before a new
	// segment is made for size; TakeKept, those it kept that a device
	// refusing a new segment of n bytes makes free at once.
	BeforeGrow(size int64) []*segment
	TakeKept(n int64) []*segment
	// Add registers a new segment and returns the active block for size
	// cut from it.
	Add(seg *segment, size int64) *block
	// Put takes back an active block; it returns its segment, removed, if
	// the pool is to free it now.
	Put(b *block) *segment
	// TakeLargest removes the largest wholly free segment, for the pool to
	// free; nil if none. TakeFreeIf removes one whose block pred accepts.
	TakeLargest() *segment
	TakeFreeIf(pred func(*block) bool) *segment
	// LargestFree and Counts describe the free set; Counts is the policy's
	// own, kept up to date, for the ledger to read.
	LargestFree() int64
	Counts() *policy.Counts
	// TakeStale appends the sub-buffers of blocks whose range changed.
	TakeStale(dst []mem) []mem
}

// blockSizeOf is p.pol.BlockSize(size) without the interface call, for
// the queue caches' hot path: the policies' own functions, called
// directly.
func (p *Pool) blockSizeOf(size int64) int64 {
	if p.arena {
		return policy.Round(size, p.align)
	}
	return policy.AllocSize(policy.BinNumber(size, p.leadingBits), p.leadingBits)
}

// overlapSafe reports whether every device of ctx survives partly
// overlapping sub-buffers (cl.Device.OverlappingSubBuffersSafe); false if
// the context is unknown (an allocator that does not tell it). Where it is
// false (NVIDIA's driver), the arena parks no sub-buffer, so that no two of
// its sub-buffers ever overlap.
func overlapSafe(ctx *cl.Context) bool {
	if ctx == nil {
		return false
	}
	for _, d := range ctx.Devices() {
		if !d.OverlappingSubBuffersSafe() {
			return false
		}
	}
	return true
}

// arenaAlignment returns the alignment of an arena's blocks in ctx: the
// largest base-address alignment of its devices (which sub-buffers need),
// rounded up to a power of two, at least policy.MinBlock; 4 KiB when the
// context is unknown.
func arenaAlignment(ctx *cl.Context) int64 {
	need := ctx.MemBaseAddrAlign()
	if need == 0 {
		return 4096
	}
	a := int64(policy.MinBlock)
	for a < need {
		a *= 2
	}
	return a
}
