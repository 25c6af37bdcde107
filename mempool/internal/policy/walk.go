package policy

import "iter"

// Blocks returns the segment's blocks in the order of their offsets; they
// cover it. A segment of one block (an exact bin's, an exact-size or
// oversize one) yields its block too. A segment a policy returns for the
// pool to free keeps its blocks, for the pool to walk (their Uses).
func (s *Segment[T]) Blocks() iter.Seq[*Block[T]] {
	return func(yield func(*Block[T]) bool) {
		for b := s.first; b != nil; b = b.next {
			if !yield(b) {
				return
			}
		}
	}
}

// IsFree reports whether the block is free: held by the pool, not handed
// out.
func (b *Block[T]) IsFree() bool { return b.free }

// WhollyFree reports whether every block of the segment is free.
func (s *Segment[T]) WhollyFree() bool {
	for b := range s.Blocks() {
		if !b.free {
			return false
		}
	}
	return true
}

// Split reports whether the segment is cut into more than one block.
func (s *Segment[T]) Split() bool { return s.blocks > 1 }

// BlockCount returns how many blocks the segment is cut into, free ones
// waiting unmerged included. It costs no walk: the policy counts them as
// it splits and merges.
func (s *Segment[T]) BlockCount() int { return s.blocks }

// Own reports whether an arena made the segment for one large request
// (over SmallRequest and its growth step): until it is wholly free, its
// blocks serve only requests of at least the policy's OwnMin.
func (s *Segment[T]) Own() bool { return s.own }

// Tiny reports whether the segment was made for tiny requests (see
// TinyBlock): it serves those only.
func (s *Segment[T]) Tiny() bool { return s.tiny }

// Huge reports whether an arena made the segment for one request over
// half its preferred segment size (not oversize): see Arenas.PassesOver.
func (s *Segment[T]) Huge() bool { return s.huge }

// Run returns the bytes of the range of b's segment that b is part of
// where every block is free or held (held reports whether an active block
// is, as a block waiting in a pool's cache is): b's, and its neighbours'
// on both sides as far as that holds. A block of a segment of one block
// (an exact bin's) is its own run.
func (b *Block[T]) Run(held func(*Block[T]) bool) int64 {
	n := b.Size
	for x := b.prev; x != nil && (x.free || held(x)); x = x.prev {
		n += x.Size
	}
	for x := b.next; x != nil && (x.free || held(x)); x = x.next {
		n += x.Size
	}
	return n
}
