package policy

import (
	"fmt"
	"math/bits"
)

// freeIndex lists free blocks by size class (the bins of BinNumber) in
// TLSF's two-level index: a bitmap of exponents with a listed block, and
// per exponent a bitmap of its classes, so that the first class above a
// size that has a block is found in O(1).
//
// Each class's list is doubly linked through the blocks' fprev and fnext,
// smallest first, the newest first among blocks of one size; the head's
// fprev is the tail (the class's largest block), the tail's fnext nil. So
// whether a class has a block of at least n bytes is known in O(1) (its
// tail), and its smallest such block is found, as the place to list a
// block is, by walking from both ends of the list at once: past the
// blocks smaller than n or past those that fit, whichever are fewer. A
// class of one size (every class of blocks under 2^(lb+1) units) has no
// such walk.
type freeIndex[T comparable] struct {
	lb    int
	heads classTable[*Block[T]] // the first block of each class
	top   uint64                // bit e: exponent e has a listed block
	marks [64][]uint64          // marks[e], bit m: class e<<lb|m has a block
	n     int                   // blocks listed
}

func newFreeIndex[T comparable](lb int) freeIndex[T] {
	return freeIndex[T]{lb: lb, heads: newClassTable[*Block[T]](lb)}
}

// head returns the smallest block of class c (the newest of its size),
// or nil.
func (x *freeIndex[T]) head(c uint32) *Block[T] { return x.heads.get(c) }

// tail returns the largest block of class c, or nil.
func (x *freeIndex[T]) tail(c uint32) *Block[T] {
	if h := x.heads.get(c); h != nil {
		return h.fprev
	}
	return nil
}

// fit returns the smallest block of class c of at least n bytes, the
// newest of that size; nil if none.
func (x *freeIndex[T]) fit(c uint32, n int64) *Block[T] {
	head := x.heads.get(c)
	if head == nil || head.fprev.Size < n {
		return nil
	}
	// The blocks that fit are the list's tail end: walk to its first
	// from both ends at once, so that the walk is as long as the shorter
	// side (the blocks smaller than n, or those that fit).
	f, r := head, head.fprev // r fits
	for {
		if f.Size >= n {
			return f
		}
		if r.fprev.Size < n { // r is not the head: f is before it
			return r
		}
		f, r = f.fnext, r.fprev
	}
}

// next returns the block after b, listed, in size order: the next of its
// class, else the first of the next class that has one; nil if none.
func (x *freeIndex[T]) next(b *Block[T]) *Block[T] {
	if b.fnext != nil {
		return b.fnext
	}
	if c, ok := x.above(b.class); ok {
		return x.head(c)
	}
	return nil
}

// push lists b in its class, before the blocks of its size or larger.
func (x *freeIndex[T]) push(b *Block[T]) {
	c := BinNumber(b.Size, x.lb)
	b.class = c
	x.n++
	head := x.heads.get(c)
	switch {
	case head == nil:
		b.fprev, b.fnext = b, nil
		x.heads.set(c, b)
		x.mark(c)
	case b.Size <= head.Size:
		b.fprev, b.fnext = head.fprev, head
		head.fprev = b
		x.heads.set(c, b)
	case b.Size > head.fprev.Size:
		tail := head.fprev
		b.fprev, b.fnext = tail, nil
		tail.fnext = b
		head.fprev = b
	default: // between the head and the tail
		x.insert(b, head, head.fprev)
	}
}

// insert lists b after the last block smaller than it, which is f or
// after it, and before r, of its size or larger: walks from both ends at
// once, as fit does.
func (x *freeIndex[T]) insert(b, f, r *Block[T]) {
	for {
		if f.fnext.Size >= b.Size {
			break
		}
		if r.fprev.Size < b.Size {
			f = r.fprev
			break
		}
		f, r = f.fnext, r.fprev
	}
	n := f.fnext
	b.fprev, b.fnext = f, n
	n.fprev = b
	f.fnext = b
}

// mark notes that class c has a block.
func (x *freeIndex[T]) mark(c uint32) {
	e, m := c>>x.lb, c&(1<<x.lb-1)
	if x.marks[e] == nil {
		x.marks[e] = make([]uint64, (1<<x.lb+63)/64)
	}
	x.marks[e][m/64] |= 1 << (m % 64)
	x.top |= 1 << e
}

// remove takes b, listed, off its class's list.
func (x *freeIndex[T]) remove(b *Block[T]) {
	c := b.class
	x.n--
	p, n := b.fprev, b.fnext
	b.fprev, b.fnext = nil, nil
	if p.fnext != b { // b is the head; p, the tail
		x.heads.set(c, n)
		if n != nil {
			n.fprev = p
			return
		}
		x.unmark(c)
		return
	}
	p.fnext = n
	if n != nil {
		n.fprev = p
	} else { // b was the tail
		x.heads.get(c).fprev = p
	}
}

// unmark notes that class c has no block left.
func (x *freeIndex[T]) unmark(c uint32) {
	e, m := c>>x.lb, c&(1<<x.lb-1)
	x.marks[e][m/64] &^= 1 << (m % 64)
	for _, w := range x.marks[e] {
		if w != 0 {
			return
		}
	}
	x.top &^= 1 << e
}

// above returns the smallest class above c that has a block.
func (x *freeIndex[T]) above(c uint32) (uint32, bool) {
	e, m := int(c>>x.lb), int(c&(1<<x.lb-1))
	if row := x.marks[e]; row != nil {
		for w := (m + 1) / 64; w < len(row); w++ {
			word := row[w]
			if w == (m+1)/64 {
				word &= ^uint64(0) << ((m + 1) % 64)
			}
			if word != 0 {
				return uint32(e)<<x.lb | uint32(w*64+bits.TrailingZeros64(word)), true
			}
		}
	}
	if e == 63 {
		return 0, false
	}
	above := x.top &^ (1<<(e+1) - 1)
	if above == 0 {
		return 0, false
	}
	e = bits.TrailingZeros64(above)
	for w, word := range x.marks[e] {
		if word != 0 {
			return uint32(e)<<x.lb | uint32(w*64+bits.TrailingZeros64(word)), true
		}
	}
	return 0, false
}

// largest returns the largest class that has a block.
func (x *freeIndex[T]) largest() (uint32, bool) {
	if x.top == 0 {
		return 0, false
	}
	e := 63 - bits.LeadingZeros64(x.top)
	row := x.marks[e]
	for w := len(row) - 1; w >= 0; w-- {
		if row[w] != 0 {
			return uint32(e)<<x.lb | uint32(w*64+63-bits.LeadingZeros64(row[w])), true
		}
	}
	return 0, false
}

// each calls f for every listed block, class by class; f must not change
// the index.
func (x *freeIndex[T]) each(f func(c uint32, b *Block[T])) {
	for e := range x.marks {
		for w, word := range x.marks[e] {
			for ; word != 0; word &= word - 1 {
				c := uint32(e)<<x.lb | uint32(w*64+bits.TrailingZeros64(word))
				for b := x.heads.get(c); b != nil; b = b.fnext {
					f(c, b)
				}
			}
		}
	}
}

// check verifies, for Check, that every marked class has a list, sorted
// by size and linked both ways, whose head's fprev is its tail, and that
// they hold every block counted.
func (x *freeIndex[T]) check() error {
	n := 0
	for e := range x.marks {
		for w, word := range x.marks[e] {
			for ; word != 0; word &= word - 1 {
				c := uint32(e)<<x.lb | uint32(w*64+bits.TrailingZeros64(word))
				head := x.heads.get(c)
				if head == nil {
					return fmt.Errorf("class %d marked, but empty", c)
				}
				last := head
				for b := head; b != nil; b = b.fnext {
					n++
					if b != head && (b.fprev != last || b.Size < last.Size) {
						return fmt.Errorf("class %d: block of %d bytes after one of %d, or its links broken", c, b.Size, last.Size)
					}
					last = b
				}
				if head.fprev != last {
					return fmt.Errorf("class %d: the head's fprev is not its tail", c)
				}
			}
		}
	}
	if n != x.n {
		return fmt.Errorf("%d blocks in marked classes, %d counted", n, x.n)
	}
	return nil
}

// listed reports whether b is on its class's list.
func (x *freeIndex[T]) listed(b *Block[T]) bool {
	for y := x.heads.get(b.class); y != nil; y = y.fnext {
		if y == b {
			return true
		}
	}
	return false
}
