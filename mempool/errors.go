package mempool

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrOutOfMemory matches every *OutOfMemoryError: the pool's limit
	// refused a request, or the device ran out of memory after the pool had
	// freed everything it held.
	ErrOutOfMemory = errors.New("mempool: out of memory")
	// ErrClosed is returned by Close of a PooledBuffer already closed.
	ErrClosed = errors.New("mempool: buffer already closed")
	// ErrPoolClosed is returned by Allocate on a closed Pool.
	ErrPoolClosed = errors.New("mempool: pool is closed")
)

// OutOfMemoryError is the error of a request the pool could not serve: what
// was asked, and where the memory is. It matches ErrOutOfMemory, and unwraps
// to the allocator's error when the device (not the limit) refused.
type OutOfMemoryError struct {
	Requested    int64 // the bytes asked for
	AllocSize    int64 // the bytes of the bin the pool tried to allocate
	ActiveBlocks int   // blocks in use
	ActiveBytes  int64 // bytes asked for by the blocks in use
	HeldBlocks   int   // blocks held for reuse (all freed first, so usually 0)
	HeldBytes    int64
	ManagedBytes int64 // bytes the pool owns: active blocks' alloc sizes plus held
	Limit        int64 // the pool's limit; 0 if none
	DeviceTotal  int64 // the device's global memory; 0 if the pool does not know its device

	// The largest bin still holding a block (after the pool freed what it
	// could, a block only a concurrent Close brought back), and its size.
	LargestHeldBin  uint32
	LargestHeldSize int64 // 0 if nothing is held

	Err error // the allocator's error; nil if the limit refused
}

// Error says what was asked, what is active and what is held.
func (e *OutOfMemoryError) Error() string {
	s := fmt.Sprintf("mempool: out of memory: requested %d bytes (allocating %d); %d blocks active holding %d bytes requested, %d blocks held (%d bytes), %d bytes managed",
		e.Requested, e.AllocSize, e.ActiveBlocks, e.ActiveBytes, e.HeldBlocks, e.HeldBytes, e.ManagedBytes)
	if e.LargestHeldSize > 0 {
		s += fmt.Sprintf(" (largest held: bin %d, %d bytes)", e.LargestHeldBin, e.LargestHeldSize)
	}
	if e.Limit > 0 {
		s += fmt.Sprintf(", limit %d", e.Limit)
	}
	if e.DeviceTotal > 0 {
		s += fmt.Sprintf(", device total %d", e.DeviceTotal)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	} else {
		s += ": over the pool's limit"
	}
	return s
}

// Is reports whether target is ErrOutOfMemory.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// Unwrap returns the allocator's error.
func (e *OutOfMemoryError) Unwrap() error { return e.Err }
