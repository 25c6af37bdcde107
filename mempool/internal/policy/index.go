package policy

import "math/bits"

// freeIndex lists free blocks by size class (the bins of BinNumber) in
// TLSF's two-level index: a bitmap of exponents with a listed block, and
// per exponent a bitmap of its classes, so that the first class above a
// size that has a block is found in O(1). Each class's list is doubly
// linked through the blocks' fprev and fnext, newest first.
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

// head returns the newest block of class c, or nil.
func (x *freeIndex[T]) head(c uint32) *Block[T] { return x.heads.get(c) }

// push lists b at the head of its class.
func (x *freeIndex[T]) push(b *Block[T]) {
	c := BinNumber(b.Size, x.lb)
	b.class = c
	head := x.heads.get(c)
	b.fprev, b.fnext = nil, head
	if head != nil {
		head.fprev = b
	}
	x.heads.set(c, b)
	x.n++
	if head != nil {
		return
	}
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
	if b.fprev != nil {
		b.fprev.fnext = b.fnext
	} else {
		x.heads.set(c, b.fnext)
	}
	if b.fnext != nil {
		b.fnext.fprev = b.fprev
	}
	b.fprev, b.fnext = nil, nil
	x.n--
	if x.heads.get(c) != nil {
		return
	}
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

// listed reports whether b is on its class's list.
func (x *freeIndex[T]) listed(b *Block[T]) bool {
	for y := x.heads.get(b.class); y != nil; y = y.fnext {
		if y == b {
			return true
		}
	}
	return false
}
