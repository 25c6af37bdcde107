// Package mempool is a memory pool for OpenCL device buffers, with the
// semantics of PyOpenCL's pyopencl.tools.MemoryPool, safe for concurrent use.
//
// Allocating device memory is slow: a driver call, often a synchronization.
// Programs built from array operations allocate a fresh temporary for every
// intermediate result, mostly of sizes they used a moment ago. A Pool keeps
// the blocks its users give back, binned by size, and hands them out again.
//
// # Bins
//
// A request of size bytes goes to bin BinNumber(size, lb): the position of
// its leading one bit and the lb bits after it (lb is PyOpenCL's
// leading_bits_in_bin_id, 4 by default, set with WithLeadingBits). A miss
// allocates AllocSize(bin) bytes, the largest size of the bin, so every
// block of a bin serves every request of it; a block wastes at most 1/2^lb
// of its size. Both functions match PyOpenCL exactly. One departure: a
// request the device can hold whose bin's AllocSize it cannot (near
// MaxMemAllocSize) gets a block of exactly its size, freed on Close.
//
// # Arena
//
// WithArena replaces exact bins with a splitting arena, as CuPy's, torch's
// and VMA's pools are. Segments are device buffers from the allocator, sized
// to the pool: the first is 512 KiB, and each one after grows the pool by a
// twelfth of what it holds (less the free bytes of its segments in use, at
// least a forty-eighth, in 64 KiB units, at most 256 MiB); a request larger
// than that gets a segment of its own size, rounded to 4 KiB, and one over
// 128 MiB always does. While such a huge segment is more than twice the
// growth step, no request the step would serve takes a block of it: small
// blocks never pin it, and the next huge array finds it whole (or the
// pool frees it before it grows). So a small program takes one small
// segment, and a large one few. Small and large requests share the
// segments (keeping them apart, as torch does, cost up to 7 times the
// device allocations for a few percent of memory). Where the limit leaves less room, a segment
// shrinks to the room; after the device or the limit refuses one and
// nothing else helps, a segment of the request's own size (see Out of
// memory). A request takes the smallest free block of its class that
// fits, else one of the next class that has one (a two-level size-class
// index, the classes being the bins above, each class kept by size)
// and splits off the rest; a block given back merges with its free
// neighbours. A few small blocks given back wait unmerged instead, for a
// request of exactly their size (a loop that allocates and frees the same
// sizes then neither splits nor merges); any other request merges them
// first, so they never make the pool grow. Blocks are aligned to the device's base-address alignment,
// at least 512 bytes. Wholly free segments are kept for reuse until the
// pool is about to grow past the most it has held and a sixteenth past
// the most its blocks ever took, when they go first (so phases of a
// program that take turns at the peak keep their segments), even if the
// queue caches, drained next, then hold a block that serves the request;
// FreeHeld and the out-of-memory ladder free them too. WithMaxSplitSize
// gives requests over a size segments of their own that are never split.
//
// A segment made for one large request (past the growth step) serves
// only requests of at least 1/192 of the pool until it is wholly free, so
// that a small long-lived block cannot keep a large segment from going
// back; and, while an ordinary block fits, only requests of at least an
// eighth of its size, so that the next array of its size finds its tail
// free. And when a pool whose last busy period grew it by a little goes
// idle (at most an eighth of it in use, the rest wholly free segments),
// its next request gets one segment of that period's peak and an eighth
// more in place of the wholly free ones: a program whose rounds each
// need a little more (a sort of a growing set) takes a segment every few
// rounds, not one per array per round. A pool that fills (nothing given
// back since its last new segment: a program allocating its state) grows
// faster while its requests are no larger than the one that began the
// fill, each new segment holding twice the blocks of the one before, up
// to a sixteenth of the pool: 100 arrays allocated first take about half
// as many segments as arrays, not one each.
//
// Tiny requests (a block of the alignment: a scalar, a reduction's
// result) take blocks of tiny segments (4 KiB, or eight blocks, at first;
// each next one adds half what they hold, and at least as much as the
// first), else the smallest free block
// of a segment in use, and never cut a wholly free segment (but to take
// back a block of their size that waits unmerged there): a pool exactly
// as large as its live peak (a CG solver's seven arrays, each a segment)
// then keeps every segment for its arrays, where a scalar cut from one
// made the next array miss. No other request takes a tiny segment's
// blocks until the device or the limit refuses it a segment (see Out of
// memory).
//
// A block of an arena is a range of its segment: Base and Offset name it,
// and array/ passes them to kernels. Buffer makes a sub-buffer covering
// exactly the block at its first call and keeps it for the next block with
// the same range; on a device whose runtime crashes on partly overlapping
// sub-buffers (NVIDIA's: cl.Device.OverlappingSubBuffersSafe), only while
// the range stays a block, and it is released as the range changes. The
// policies themselves are plain data structures in internal/policy, tested
// without OpenCL.
//
// # Queues
//
// One pool serves many command queues. The contract is CuPy's and torch's:
// Close a PooledBuffer (or drop it) right after enqueueing the last command
// that uses it; the pool never hands its memory to any queue before the
// commands enqueued before Close may have finished with it.
//
//	on := pool.On(q)            // an allocator for use on q
//	b, _ := on.Allocate(n)
//	q.EnqueueNDRangeKernel(k, ...) // uses b
//	b.Close()                   // legal at once
//
// A block remembers the queue it was allocated for, and the queues
// RecordQueue added. Reused on the same in-order queue, it costs no OpenCL
// call: the queue runs its commands in order. Taken by another queue, or
// by an out-of-order queue (even its own), it is ordered on the device: a
// marker on each queue that may still use it, enqueued then (not at
// Close) and shared by every block given back there before it, and one
// barrier in the asking queue that waits on every such marker (one
// barrier per marker is not enough: POCL's out-of-order queues honour only
// the last of two barriers in a row, and package cl makes each barrier on
// an out-of-order queue keep the one before: two handovers in a row keep
// both waits). A marker seen complete needs no
// waiting; the pool never waits on the host for a queue to hand a
// block over (only before it frees SVM, and in a pool over pinned host
// memory, below), never calls clFinish (but in such a pool).
// (On POCL, an out-of-order queue that is never finished slows down as
// its markers and barriers pile up: four batches of 500 reuses on one
// took 1, 9, 20 and 73 s; the same markers and barriers enqueued through
// package cl alone slow down the same way. A program that reuses blocks
// on such a queue should call Finish on it now and then.)
// Requests prefer a block that only their queue may still use, among the
// few they look at first: exact bins, the four blocks of the bin most
// recently given back; the arena, the blocks of the request's size that
// wait unmerged (at most four small and two large). Past those, a request
// takes the block the policy would take anyway, whichever queue used it
// last, and waits for that queue's commands (a handover): a search of
// every free block for the request's queue would cost every request.
// pool.Allocate allocates on the allocator's queue (allocator.Immediate's);
// over an allocator without a queue, a block last used on a queue waits on
// the host for that queue's marker, and other ordering is the caller's.
// Stats.Queues has each queue's figures, under the name On's QueueName
// gives the queue, if any; QueueAllocator.FreeHeld frees what only one
// queue may still use. A queue may be released before the pool: its
// commands finished, nothing waits for it, and the pool forgets it as
// more queues come (see PooledBuffer.RecordQueue), so a queue per task
// costs the pool a line of Stats.Queues, not a queue's state.
//
// # Several devices
//
// A Set serves every device of a program, as CuPy's MemoryPool does: it
// keeps a pool per context, made at the first request on one of its queues,
// and routes each request (Set.On(q)) to the pool of q's context. Limits
// are per context (Set.SetLimit); Set.Stats has each device's statistics
// and their totals; FreeHeld and Close reach every pool. A context of
// several devices is one pool, whose blocks suit every device of it (the
// largest alignment, the least largest buffer).
//
// # Shared virtual memory
//
// NewSVM makes the same pool over an allocator.SVMAllocator: one pool over
// either kind of memory, as PyOpenCL's mempool.hpp is one pool over a
// pointer type, with the same policies, limits, queue ordering, hooks and
// statistics. A PooledBuffer of an SVM pool has SVM and Offset instead of
// Buffer and Base (which return nil there):
//
//	alloc, _ := allocator.NewImmediateSVM(q, false) // coarse grain; out-of-memory shows at allocation
//	pool, _ := mempool.NewSVM(alloc, mempool.WithArena())
//	b, _ := pool.Allocate(n)
//	k.SetArgSVMPointer(0, b.SVM(), b.Offset())
//
// The host reaches a block through a blocking cl.CommandQueue.EnqueueSVMMap
// of its range (or ReadSVM and WriteSVM), which its queue orders after the
// commands enqueued before: a block reused on one queue may still be read
// by a kernel enqueued before its last Close. A fine-grain block's bytes
// (b.SVM().Bytes()[b.Offset():]) are the host's without a map only once
// those commands have completed. The blocks of one arena segment share its
// SVM, and one map at a time may cover an SVM: map one block, unmap it,
// then the next (or use exact bins, whose blocks are SVMs of their own).
// NewSVMSet keeps an SVM pool per context, as NewSet does for buffers.
// clSVMFree, unlike clReleaseMemObject, does not wait for the commands
// that use the memory: before it frees SVM (FreeHeld, StopHolding, Close,
// the out-of-memory ladder, or a Close after StopHolding), the pool waits
// on the host for the queues whose commands may still use it. A queue
// released before that has nothing left to wait for (cl's Release finishes
// its commands first: CommandQueue.Finished, which waits for a Release
// under way); SVM whose queue cannot be waited for otherwise (its Release
// failed to finish it) is left allocated (leaked), and the call that would
// have freed it returns the error. The pool knows those queues only for
// blocks allocated on one (Pool.On, or an allocator.ImmediateSVM's queue):
// over a plain allocator.SVM, Close a block only once its commands have
// completed.
//
// # Pinned host memory
//
// A pool over an allocator.Pinned, or any allocator whose buffers stay
// mapped to host memory (allocator.HostOf finds its Host method, through
// wrappers whose Unwrap returns an Allocator), is a pinned memory pool,
// as CuPy's PinnedMemoryPool and torch's caching host allocator are. Its
// blocks go to the host, which reads and writes their bytes
// (pinned.Host(b.Base())[b.Offset():]) in no queue's order: a block that
// commands may still use when it was closed (its queue's: On's, or, for
// pool.Allocate, the allocator's queue, if it has one; and RecordQueue's)
// is handed out again only once the host has waited for those queues
// (clFinish, each, which an idle queue answers at once), so a Close right
// after enqueueing a non-blocking transfer from the bytes is legal, as a
// torch tensor's free after copy_(non_blocking=True) is. Where torch
// takes another block while the copy runs, the request waits for it, and
// for every command enqueued on those queues so far: give transfers a
// queue of their own, not one that also runs long kernels. A transfer on
// a queue the pool does not know of (not the block's, and not named by
// RecordQueue) must complete before Close. Stats.Queues counts each wait
// as a host wait of the queue waited for, and a handover of the asking
// queue if another queue used the block. A segment is freed (unmapped)
// only once those queues' commands have completed, as SVM is. Such a pool
// has no queue caches (a hit would skip the wait), and no sanitizer (its
// commands on a mapped buffer are undefined): WithSanitizer fails, and
// CLPOOL_SANITIZE leaves it alone (but for a value it does not know).
//
// # Lifecycle
//
//	pool, _ := mempool.New(alloc)     // alloc: an allocator.Immediate, usually
//	b, _ := pool.Allocate(n)          // a held block of the bin (LIFO, its queue's first), or a new one
//	use(b.Buffer())
//	b.Close()                         // back to the pool, held for reuse
//
// A PooledBuffer dropped without Close goes back after the garbage collector
// finds it unreachable. That costs a finalizer per Allocate, most of a hit's
// price; WithDropSafety(false) turns it off, and a hit then allocates
// nothing at all. FreeHeld frees what the pool holds; StopHolding frees it and
// makes every later Close free its block at once. Close refuses further
// Allocates.
//
// # Out of memory
//
// A request goes down one ladder, in one order, whether the limit or the
// device refuses a new segment (the allocator reports
// cl.ErrMemObjectAllocationFailure, cl.ErrOutOfResources,
// cl.ErrOutOfHostMemory or allocator.ErrOutOfMemory):
//
//  1. a free block that fits, the queue caches drained first;
//  2. a new segment of the policy's size;
//  3. on a refusal, an arena first retries with any free block that fits,
//     whatever its placement rules (the tail of a segment sized for one
//     large request, say), if one does; then it frees the wholly free
//     segments it kept while growing within its slack, and retries: they
//     cost nothing to give up;
//  4. with drop safety, the garbage collector runs, so that dropped
//     buffers come back (PyOpenCL's order), and, if any did, the request
//     is tried again;
//  5. the queue caches and the quarantine are drained, and the request
//     tried again; then wholly free segments (with exact bins, held
//     blocks) are freed one at a time, largest first, retrying after each;
//  6. a segment of the request's own size instead of the policy's, as
//     RMM's pool grows by the request: near a full device a 1000-byte
//     request takes one block's bytes, not a segment's (with exact bins,
//     its bin's block size, as PyOpenCL allocates: a request of 1 MiB
//     takes 1,114,111 bytes);
//  7. memory on its way (segments allocated or freed, blocks leaving the
//     quarantine) is waited for, half a second at most in all, again if a
//     Close ends the wait first; if a block fits, memory came or was freed,
//     or the limit has room, every wholly free segment is freed with the
//     request's segment reserved, and the request tried again (16 at most);
//  8. Allocate returns an *OutOfMemoryError that says where the memory is,
//     wraps the allocator's error (nil for the limit's, and for a segment
//     that would take the managed bytes past math.MaxInt64, which the
//     pool cannot count) and matches ErrOutOfMemory (the same value as
//     allocator.ErrOutOfMemory).
//
// From the first refusal on, every retry takes any free block that fits: an
// arena's placement rules (an own segment's blocks kept for large requests,
// tiny requests kept to tiny segments and the holes of segments in use) give
// way before the request fails. An oversize request (WithMaxSplitSize) still
// takes only a wholly free oversize segment: no block of it is ever split.
//
// Other allocator errors return at once, the request counted as a miss.
// A request larger than the device's largest buffer (MaxMemAllocSize)
// fails at once, freeing nothing, with an *OutOfMemoryError that names
// that size and matches cl.ErrInvalidBufferSize, as torch's and CuPy's
// users expect. As every refused request, it counts as a miss of its
// queue and in OOMs, its error says what is active and held, and it
// reaches the hooks as a failed malloc on its queue.
//
// # Limits
//
// A limit caps the pool's managed bytes, checked before the device is asked
// (segments being allocated count against it): a request that would pass
// it goes down the ladder above. An arena's segment larger than the room
// the limit leaves shrinks to the room, if the request fits. A request
// whose own block could not fit even in an empty pool fails at once and
// keeps what the pool holds, once the queue caches are drained and no
// free block fits it. The limit comes from WithLimit (bytes),
// WithLimitFraction (of the device's global memory, as torch's
// set_per_process_memory_fraction), or, when neither is given, the
// environment variable CLPOOL_MEMORY_LIMIT ("1073741824", "2GiB", "50%"), as
// CUPY_GPU_MEMORY_LIMIT does for CuPy. SetLimit changes it at run time and
// Limit reads it; lowering it below what the pool manages frees held
// segments, largest first, until the pool is within it.
//
// # Counters and statistics
//
// Stats returns the counters, consistent at one moment: active and held blocks and bytes,
// managed bytes and peaks, hits and misses, device allocations and frees,
// reclaimed buffers and out-of-memory retries, and the statistics of
// torch.cuda.memory_stats (allocation, allocated bytes, segment, reserved
// bytes; each current, peak, allocated and freed, for all, small and large
// blocks). MemoryStats returns those under torch's key names; ResetPeak and
// ResetAccumulated reset them as torch's functions do. HeldBlocks,
// ActiveBlocks, ManagedBytes, ActiveBytes and HeldBytes read single counters.
//
// Snapshot returns the segments and blocks themselves: each block's offset,
// size, requested size, state (active, held, or torch's inactive split),
// queue, and call site where a hook knows it; the pool's peaks (Stats'); with
// a memhooks.History hook, the last events too. It marshals to the JSON that `clpool viz` draws.
//
// # Hooks
//
// AddHook registers a Hook, which is told of CuPy's six events: a device
// allocation (alloc, before and after), every Allocate (malloc), and every
// block given back (free), with the device, sizes, buffer, block id, queue
// and error; and of a seventh, segment_free, for every segment given back
// to the allocator. Hooks are per pool, for every goroutine that uses it: Go has no
// goroutine-local state to scope them as CuPy's with blocks do. Package
// memhooks has ready-made ones: a JSON-lines printer, a line profiler that
// writes pprof profiles, and a trace recorder.
//
// # Many goroutines
//
// Each in-order queue keeps a small cache of its own (but in a pool over
// pinned memory, or with the sanitizer): up to 16 small
// blocks (1 MiB at most) given back on it wait there, and a request on the
// queue for a block of exactly that size takes one back under the queue's
// lock alone, without the pool's. So goroutines that each allocate on a
// queue of their own (through Pool.On, or pool.Allocate over an allocator
// of that queue) do not contend, and a hit costs less than the pool's
// own path even on one queue. Requests on no queue (pool.Allocate over
// allocator.Deferred) have a cache of their own, which only they use. With drop safety, the hit sets its
// buffer's finalizer, and Close clears it, under that queue's lock, which
// lines up the finalizer calls of the goroutines on one queue (the
// runtime's own lock for them costs far more contended).
//
// The counters still see every operation in order (summed in turns, each
// the operations of one queue's cache with no other's in between, and
// brought under the pool's lock every 128 operations, before Stats,
// and before any operation that takes the pool's lock, for every cache
// not in use at that moment, turn by turn in the order they were made;
// so only a peak across queues used by goroutines at the same time can
// be off, while they run at once, by what one queue's cache moved since
// its last flush).
// In an arena, a queue's cache holds at most a 128th of the pool (more
// would keep blocks apart that merged would serve other sizes: at a
// sixteenth, small pools held up to 1.35x their plan), and, apart,
// blocks that each cover a segment of at least an eighth of it, up to
// half (waiting, they keep nothing from merging; a CG solver's pool of a
// few one-array segments then hits in its cache). In an arena that
// manages under 4 MiB, a request (not tiny) that its queue's cache misses
// first gives back the blocks that waited there over the queue's last
// four requests (in a pool of a few segments, every block waiting there
// splits the space the request is placed in; a loop of up to five sizes
// keeps hitting).
// A request the pool cannot otherwise serve, FreeHeld and the
// out-of-memory ladder first give every cached block back to the pool, so
// memory is still reused across queues. Blocks in a cache count as held;
// in an arena they wait unmerged until then. A registered hook turns the
// caches off while it is registered, so that it sees every block (those
// cached before it was registered stay cached, and serve no request, until
// a request the pool cannot otherwise serve, FreeHeld or the ladder gives
// them back).
//
// A pool per goroutine (over one allocator) shares nothing at all, but
// blocks held by one pool are invisible to the others, so a program holds
// more memory in all. BENCHMARKS.md has the figures.
//
// # Sanitizer
//
// WithSanitizer (or the environment variable CLPOOL_SANITIZE=1) makes a pool
// find four memory bugs, each with the line that allocated the block (Finding,
// Pool.Findings): a write past the bytes requested (OutOfBounds), found in at
// least SanitizerGuard guard bytes after every block, inside its cl_mem, by a
// check kernel at Close; a write after Close (WriteAfterClose), found in the
// poison a closed block is filled with while it waits in a first-in first-out
// quarantine before reuse; a PooledBuffer the garbage collector reclaimed
// without Close (Dropped); and a block open at the pool's Close
// (LeakedAtClose). The checks are ordered after the commands that may still use
// the block, as a handover is, and read without waiting on the device until
// Findings or Close. Each finding is printed once to standard error as it is
// found (WithSanitizerOutput redirects or silences it). A sanitized pool has no
// queue caches, keeps drop safety on, counts its guard bytes against the limit
// and its quarantine as held (a block closed while a request is on the
// out-of-memory ladder passes through it at once: a write after its Close goes
// unseen), and is much slower (BENCHMARKS.md); with the sanitizer off, nothing
// of it runs on the hit. Blocks of an allocator without a queue are checked on
// the sanitizer's own queue: close them once their commands have completed.
//
// # Misuse
//
// A second Close returns ErrClosed and changes nothing. After Close, Buffer
// returns nil: the block may belong to someone else already. A PooledBuffer
// must stay reachable while commands that use its buffer run. Bad input (a
// negative size, a bad limit, a nil option) is an error that changes nothing.
//
// A hook or an allocator that panics does not break the pool: it recovers
// the panic, finishes what it was doing so that every count stays right and
// every device buffer is freed exactly once, and returns a *PanicError
// (matching ErrPanicked) from the method that called it. An Allocate whose
// hook panicked fails, and its block goes back to the pool; a Close whose
// hook panicked still gives the block back; a FreeHeld whose allocator's
// Free panicked still frees the other segments. FreeHeld, StopHolding and
// Close return the allocator's errors, joined.
package mempool
