package mempool

import "github.com/clpool/clpool/mempool/internal/policy"

// MaxLeadingBits is the largest leading_bits_in_bin_id New accepts. With
// 20 bits, sizes are binned to within one part in a million; more would only
// add bins, and the bin number (exponent << bits | mantissa) must fit 32 bits.
const MaxLeadingBits = policy.MaxLeadingBits

// BinNumber returns the bin of a request of size bytes, exactly as
// PyOpenCL's memory_pool::bin_number computes it: with l = floor(log2 size),
// the bin is l << leadingBits | (the leadingBits bits after the leading one
// of size). Sizes 0 and 1 are bin 0. Sizes below 0 are binned as 0.
func BinNumber(size int64, leadingBits int) uint32 { return policy.BinNumber(size, leadingBits) }

// AllocSize returns the bytes the pool allocates for a bin, exactly as
// PyOpenCL's memory_pool::alloc_size computes it: the largest size whose
// leading bits are the bin's, so that every size of the bin fits. Bin 0 is
// 1 byte. It is defined for the bins BinNumber returns.
func AllocSize(bin uint32, leadingBits int) int64 { return policy.AllocSize(bin, leadingBits) }
