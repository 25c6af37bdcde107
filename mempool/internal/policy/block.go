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

	blocks int       // how many blocks it is cut into
	first  *Block[T] // the block at offset 0
	arena  *Arena[T] // the arena it belongs to; nil in Bins
	idx    int       // its index in the arena's segs
}

// Block is a byte range of a Segment: active (handed out) or free.
type Block[T comparable] struct {
	Seg  *Segment[T]
	Off  int64 // from the segment's start
	Size int64 // bytes; at least the request's

	// Cache is a handle the pool made for exactly this range (a
	// sub-buffer), kept while the range stays the same. When an arena
	// changes the range or merges the block away, it moves Cache to its
	// stale list for the pool to release (see Arenas.TakeStale).
	Cache T

	free       bool
	class      uint32    // the size class it is indexed under, while free
	prev, next *Block[T] // neighbours in the segment, by address (arena)
	fprev      *Block[T] // neighbours in its free list (arena)
	fnext      *Block[T]
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
	// Of them, the blocks that share their segment with other blocks
	// (torch's inactive_split), and their bytes.
	SplitBlocks int
	SplitBytes  int64
	Segments    int // segments, active or free
}
