package mempool

// Stats is a snapshot of a pool's counters, taken under its lock, so the
// fields agree with each other.
type Stats struct {
	// Blocks and bytes now. Active blocks are handed out; held blocks were
	// given back and wait for reuse.
	ActiveBlocks int
	HeldBlocks   int
	ActiveBytes  int64 // the sizes requested for the active blocks
	HeldBytes    int64 // the alloc sizes of the held blocks
	ManagedBytes int64 // the alloc sizes of all blocks the pool owns, active or held, plus allocations in flight

	// Peaks since New.
	PeakActiveBytes  int64 // the most ActiveBytes has been
	PeakManagedBytes int64 // the most ManagedBytes has been

	// Configuration.
	LeadingBits int
	Limit       int64 // 0: no limit
	Holding     bool  // false after StopHolding or Close

	// Totals since New.
	Hits         int64 // requests served by a held block
	Misses       int64 // requests that found no held block of their bin
	DeviceAllocs int64 // buffers the allocator handed out
	DeviceFrees  int64 // buffers given back to the allocator
	FreeErrors   int64 // frees the allocator reported an error for (the buffer is dropped all the same)
	Reclaimed    int64 // buffers dropped without Close and returned by the garbage collector
	OOMRetries   int64 // device allocations that failed for lack of memory and were retried after freeing
	OOMs         int64 // requests refused with ErrOutOfMemory
}
