package policy

import "math/bits"

// quickLists holds the free blocks of an arena that wait unmerged, by
// exact size: a request of a size takes the newest block of that size in
// O(1), with no search. Each size's list is doubly linked through the
// blocks' fprev and fnext, and a bitmap marks the sizes that have one, for
// Flush to find them.
type quickLists[T comparable] struct {
	unit  int64       // block sizes are multiples of it
	heads []*Block[T] // heads[size/unit]: the newest block of size; nil if none
	mask  []uint64    // bit i: heads[i] is not nil
	n     int         // blocks listed
	max   int         // the most blocks that may be listed
}

// setLimits lets blocks of up to maxSize bytes wait, at most max of them.
// The lists must be empty.
func (q *quickLists[T]) setLimits(unit int64, max int, maxSize int64) {
	slots := int(maxSize/unit) + 1
	if max == 0 {
		slots = 0
	}
	*q = quickLists[T]{unit: unit, max: max, heads: make([]*Block[T], slots), mask: make([]uint64, (slots+63)/64)}
}

// admits reports whether a free block of size may wait.
func (q *quickLists[T]) admits(size int64) bool {
	return q.n < q.max && size/q.unit < int64(len(q.heads))
}

// get returns the newest waiting block of exactly size bytes, or nil.
func (q *quickLists[T]) get(size int64) *Block[T] {
	if i := size / q.unit; i < int64(len(q.heads)) {
		return q.heads[i]
	}
	return nil
}

// getOn returns a waiting block of exactly size bytes, preferring, among
// the newest few, one that only queue q may still use; nil if none.
func (q *quickLists[T]) getOn(size int64, queue int32) *Block[T] {
	b := q.get(size)
	if b == nil || queue == 0 || b.Only(queue) {
		return b
	}
	i := 0
	for x := b.fnext; x != nil && i < preferScan; x, i = x.fnext, i+1 {
		if x.Only(queue) {
			return x
		}
	}
	return b
}

// push lists b, free, which admits allows.
func (q *quickLists[T]) push(b *Block[T]) {
	i := b.Size / q.unit
	head := q.heads[i]
	b.fprev, b.fnext, b.quick = nil, head, true
	if head != nil {
		head.fprev = b
	} else {
		q.mask[i/64] |= 1 << (i % 64)
	}
	q.heads[i] = b
	q.n++
}

// remove takes b off its list.
func (q *quickLists[T]) remove(b *Block[T]) {
	i := b.Size / q.unit
	if b.fprev != nil {
		b.fprev.fnext = b.fnext
	} else {
		q.heads[i] = b.fnext
		if b.fnext == nil {
			q.mask[i/64] &^= 1 << (i % 64)
		}
	}
	if b.fnext != nil {
		b.fnext.fprev = b.fprev
	}
	b.fprev, b.fnext, b.quick = nil, nil, false
	q.n--
}

// any returns a waiting block, the largest, or nil if none waits.
func (q *quickLists[T]) any() *Block[T] {
	for w := len(q.mask) - 1; w >= 0; w-- {
		if q.mask[w] != 0 {
			return q.heads[w*64+63-bits.LeadingZeros64(q.mask[w])]
		}
	}
	return nil
}

// listed reports whether b is on its size's list.
func (q *quickLists[T]) listed(b *Block[T]) bool {
	for x := q.get(b.Size); x != nil; x = x.fnext {
		if x == b {
			return true
		}
	}
	return false
}
