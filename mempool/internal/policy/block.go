package policy

// Segment is memory the pool got from its allocator in one piece, cut into
// Blocks.
type Segment[T comparable] struct {
	Data T     // the pool's handle of the memory
	Size int64 // bytes

	// Exact marks a block of exactly its request's size (near the device's
	// largest buffer): it serves nobody else and is freed when given back.
	Exact bool
	// Oversize marks an arena segment made for one request over the
	// maximum split size: its block is never split (torch's oversize
	// segments).
	Oversize bool
	// Small marks a segment of the small pool (torch's small_pool): an
	// arena's segment made for a request of up to SmallRequest bytes (its
	// blocks serve any request), or a bin's block under 1 MiB.
	Small bool

	// own marks an arena segment sized for the one large request that
	// made it (over SmallRequest and the growth step): its blocks serve
	// only requests of at least the arena's ownMin, so that small blocks
	// do not pin it (see Arena.find).
	own bool
	// tiny marks an arena segment made for tiny requests (see
	// TinyBlock): it serves those only, and they take no other.
	tiny bool
	// huge marks an arena segment made for one request over half the
	// preferred segment size (not oversize): while it is more than twice
	// the growth step, its blocks serve no request the step would (see
	// passOver).
	huge bool
	// occupant is the size of the last request cut from the segment
	// while it was wholly free: the array that had it last (see
	// Arenas.regrown).
	occupant int64

	// What the pool notes of a segment, for its statistics: its split
	// blocks handed out (Out) and held outside the policy (Held), and
	// whether it is idle, Out 0 and Held not. The policies neither read
	// nor change them.
	Out, Held int32
	Idle      bool

	parked []parked[T] // caches of ranges that were blocks, for when they are again
	blocks int         // how many blocks it is cut into
	active int         // how many of them are active (arena)
	first  *Block[T]   // the block at offset 0
	arena  *Arena[T]   // the arena it belongs to; nil in Bins
	idx    int         // its index in the arena's segs
	kind   uint8       // Small's index in Counts' SplitBlocks, as the arena counts it
}

// parked is the cache of a range that was a block and may be again.
type parked[T comparable] struct {
	off, size int64
	cache     T
}

// maxParked bounds the caches a segment keeps for ranges that are not
// blocks now.
const maxParked = 8

// Block is a byte range of a Segment: active (handed out) or free.
type Block[T comparable] struct {
	Seg  *Segment[T]
	Off  int64 // from the segment's start
	Size int64 // bytes; at least the request's

	// Cache is a handle the pool made for exactly this range (a
	// sub-buffer). When an arena changes the range or merges the block
	// away, it parks Cache with the segment, and gives it back to the next
	// block with the same range; a segment parks a few, and the older ones
	// go to the stale list for the pool to release (see TakeStale).
	Cache T

	// Uses are the queues whose commands may still use a free block (see
	// Use); a merged block has the uses of both parts.
	Uses []Use

	// What the pool notes of an active block, for its snapshots: the
	// bytes asked for, the queue it is for (0: none) and its owner's ID.
	// The policies neither read nor clear them.
	Requested int64
	Queue     int32
	Owner     uint64
	// Split notes, when the block is handed out, whether its segment is
	// cut into other blocks too. That cannot change until it is given
	// back: its neighbours can merge, but not into it.
	Split bool

	free       bool
	quick      bool      // free, waiting unmerged on a quick list (arena)
	class      uint32    // the size class it is indexed under, while free
	prev, next *Block[T] // neighbours in the segment, by address (arena)
	fprev      *Block[T] // neighbours in its free list (arena; see freeIndex)
	fnext      *Block[T]
}

// Use records that a block was given back while commands enqueued on a
// queue (Queue, an id of the pool's; never 0) may still use it: a marker
// enqueued on that queue after its first Seq markers waits for them.
type Use struct {
	Queue int32
	Seq   uint64
}

// Only reports whether the only queue that may still use the block is q
// (or none does).
func (b *Block[T]) Only(q int32) bool {
	return len(b.Uses) == 0 || len(b.Uses) == 1 && b.Uses[0].Queue == q
}

// mergeUses returns the uses of a and b together, the later of two uses
// of one queue kept; the result reuses a's memory.
func mergeUses(a, b []Use) []Use {
outer:
	for _, u := range b {
		for i := range a {
			if a[i].Queue == u.Queue {
				a[i].Seq = max(a[i].Seq, u.Seq)
				continue outer
			}
		}
		a = append(a, u)
	}
	return a
}

// Whole reports whether the block covers its segment.
func (b *Block[T]) Whole() bool { return b.Off == 0 && b.Size == b.Seg.Size }

// Free reports whether the block is free (given back, not handed out).
func (b *Block[T]) Free() bool { return b.free }

// Counts is the size of a policy's free set: what the pool holds for
// reuse.
type Counts struct {
	FreeBlocks int   // free blocks
	FreeBytes  int64 // their bytes
	// Of them, the blocks in segments that have an active block (torch's
	// inactive_split: free, but not to be freed while the segment is in
	// use) and their bytes, in small ([0]) and large ([1]) segments. A
	// segment whose blocks are all free has none, merged or not.
	SplitBlocks [2]int
	SplitBytes  [2]int64
	Segments    int // segments, active or free
}
