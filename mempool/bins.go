package mempool

import (
	"math/bits"

	"github.com/clpool/clpool/cl"
)

// MaxLeadingBits is the largest leading_bits_in_bin_id New accepts. With
// 20 bits, sizes are binned to within one part in a million; more would only
// add bins, and the bin number (exponent << bits | mantissa) must fit 32 bits.
const MaxLeadingBits = 20

// BinNumber returns the bin of a request of size bytes, exactly as
// PyOpenCL's memory_pool::bin_number computes it: with l = floor(log2 size),
// the bin is l << leadingBits | (the leadingBits bits after the leading one
// of size). Sizes 0 and 1 are bin 0. Sizes below 0 are binned as 0.
func BinNumber(size int64, leadingBits int) uint32 {
	if size <= 1 {
		return 0
	}
	l := bits.Len64(uint64(size)) - 1
	var shifted uint64
	if l >= leadingBits {
		shifted = uint64(size) >> (l - leadingBits)
	} else {
		shifted = uint64(size) << (leadingBits - l)
	}
	mantissa := uint32(shifted) & (1<<leadingBits - 1)
	return uint32(l)<<leadingBits | mantissa
}

// AllocSize returns the bytes the pool allocates for a bin, exactly as
// PyOpenCL's memory_pool::alloc_size computes it: the largest size whose
// leading bits are the bin's, so that every size of the bin fits. Bin 0 is
// 1 byte. It is defined for the bins BinNumber returns.
func AllocSize(bin uint32, leadingBits int) int64 {
	exponent := int(bin >> leadingBits)
	mantissa := uint64(bin) & (1<<leadingBits - 1)
	head := uint64(1)<<leadingBits | mantissa
	shift := exponent - leadingBits
	if shift < 0 {
		return int64(head >> -shift)
	}
	ones := uint64(1)<<shift - 1
	return int64(head<<shift | ones)
}

// arrayLeadingBits is the most leading bits for which binTable indexes bins
// by arrays (1<<lb pointers per exponent in use: 8 KiB at 10 bits); above
// it, bins live in a map.
const arrayLeadingBits = 10

// bin is the stack of held buffers of one bin; the last is the most
// recently given back. Every buffer was allocated with the bin's AllocSize;
// the pool counts bytes by that, never asking a buffer its size.
type bin struct {
	pool      *Pool
	num       uint32
	exact     bool // the pool's bin of exact-size blocks: never held, and its blocks' size is their request's
	allocSize int64
	bufs      []*cl.Buffer
}

// binTable finds the bin of a bin number: by two array lookups (exponent,
// then mantissa) for the usual leading bits, so the hot path hashes nothing.
type binTable struct {
	pool  *Pool
	lb    int
	exps  [64][]*bin // exps[exponent][mantissa], made when first used
	byNum map[uint32]*bin
}

func newBinTable(p *Pool, lb int) binTable {
	t := binTable{pool: p, lb: lb}
	if lb > arrayLeadingBits {
		t.byNum = make(map[uint32]*bin)
	}
	return t
}

// get returns the bin, or nil if no block of it was ever held.
func (t *binTable) get(num uint32) *bin {
	if t.byNum != nil {
		return t.byNum[num]
	}
	row := t.exps[num>>t.lb]
	if row == nil {
		return nil
	}
	return row[num&(1<<t.lb-1)]
}

// make returns the bin, making it if needed.
func (t *binTable) make(num uint32) *bin {
	if b := t.get(num); b != nil {
		return b
	}
	b := &bin{pool: t.pool, num: num, allocSize: AllocSize(num, t.lb)}
	if t.byNum != nil {
		t.byNum[num] = b
		return b
	}
	exp := num >> t.lb
	if t.exps[exp] == nil {
		t.exps[exp] = make([]*bin, 1<<t.lb)
	}
	t.exps[exp][num&(1<<t.lb-1)] = b
	return b
}

// each calls f for every bin made, in no particular order.
func (t *binTable) each(f func(*bin)) {
	for _, b := range t.byNum {
		f(b)
	}
	for _, row := range t.exps {
		for _, b := range row {
			if b != nil {
				f(b)
			}
		}
	}
}

// largestHeld returns the largest bin that holds a block, or nil.
func (t *binTable) largestHeld() *bin {
	var largest *bin
	t.each(func(b *bin) {
		if len(b.bufs) > 0 && (largest == nil || b.num > largest.num) {
			largest = b
		}
	})
	return largest
}

// pop takes the most recently held buffer of a non-empty bin.
func (b *bin) pop() *cl.Buffer {
	last := len(b.bufs) - 1
	buf := b.bufs[last]
	b.bufs[last] = nil
	b.bufs = b.bufs[:last]
	return buf
}
