package policy

// quickLists holds the few free blocks of an arena that wait unmerged
// (DefaultQuick small ones and DefaultQuickLarge large ones), oldest first: a request of a size takes the
// newest block of that size with no search of the index and no split. They
// are so few that a scan of them costs less than any index: Flush and a
// miss look at each once.
type quickLists[T comparable] struct {
	blocks   []*Block[T] // waiting, oldest first
	maxSize  int64       // the largest small block: the others are large
	max      int         // the most small blocks that may wait
	maxLarge int         // the most large blocks that may wait
	large    int         // the large blocks waiting
}

// len returns how many blocks wait.
func (q *quickLists[T]) len() int { return len(q.blocks) }

// setLimits lets at most max small blocks (of up to maxSize bytes) and
// maxLarge larger ones wait. The lists must be empty.
func (q *quickLists[T]) setLimits(max, maxLarge int, maxSize int64) {
	*q = quickLists[T]{max: max, maxLarge: maxLarge, maxSize: maxSize, blocks: make([]*Block[T], 0, max+maxLarge)}
}

// admits reports whether a free block of size may wait.
func (q *quickLists[T]) admits(size int64) bool {
	if size <= q.maxSize {
		return len(q.blocks)-q.large < q.max
	}
	return q.large < q.maxLarge
}

// getOn returns a waiting block of exactly size bytes, the newest, or
// rather the newest that only queue (0: none) may still use; nil if none.
func (q *quickLists[T]) getOn(size int64, queue int32) *Block[T] {
	var found *Block[T]
	for i := len(q.blocks) - 1; i >= 0; i-- {
		b := q.blocks[i]
		if b.Size != size {
			continue
		}
		if queue == 0 || b.Only(queue) {
			return b
		}
		if found == nil {
			found = b
		}
	}
	return found
}

// push lists b, free, which admits allows.
func (q *quickLists[T]) push(b *Block[T]) {
	b.quick = true
	q.blocks = append(q.blocks, b)
	if b.Size > q.maxSize {
		q.large++
	}
}

// remove takes b, listed, off the list.
func (q *quickLists[T]) remove(b *Block[T]) {
	i := len(q.blocks) - 1
	for q.blocks[i] != b {
		i--
	}
	last := len(q.blocks) - 1
	copy(q.blocks[i:], q.blocks[i+1:])
	q.blocks[last] = nil // no stale pointer past the end
	q.blocks = q.blocks[:last]
	b.quick = false
	if b.Size > q.maxSize {
		q.large--
	}
}

// pop takes the largest waiting block (the newest of that size) off the
// list and returns it; nil if none waits. Flush merges the largest first:
// the order changes where later requests go (the memory figures of
// BENCHMARKS.md are with it).
func (q *quickLists[T]) pop() *Block[T] {
	if len(q.blocks) == 0 {
		return nil
	}
	b := q.blocks[len(q.blocks)-1]
	for i := len(q.blocks) - 2; i >= 0; i-- {
		if q.blocks[i].Size > b.Size {
			b = q.blocks[i]
		}
	}
	q.remove(b)
	return b
}

// listed reports whether b waits on the list.
func (q *quickLists[T]) listed(b *Block[T]) bool {
	for _, x := range q.blocks {
		if x == b {
			return true
		}
	}
	return false
}
