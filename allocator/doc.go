// Package allocator hands out OpenCL buffers for a pool or an array.
//
// Deferred is plain clCreateBuffer: fast, but a runtime that allocates lazily
// reports an out-of-memory only at the first command that touches the
// buffer, far from the allocation. Immediate probes every new buffer by
// migrating it to its queue's device with undefined content
// (clEnqueueMigrateMemObjects), which makes the runtime commit the memory at
// once and writes nothing, so an out-of-memory surfaces as the allocation's
// error, where a pool can react to it (free the blocks it holds, and retry).
// That is what package mempool expects.
//
// Both refuse MemUseHostPtr and MemCopyHostPtr (a pool's buffers carry no
// host memory) and negative sizes. Allocate(0) does not reach the driver,
// which rejects empty buffers: it returns a nil *cl.Buffer and a nil error,
// as PyOpenCL's allocators return None, and Free(nil) does nothing.
//
// Two wrappers serve both as features and as the way to test what CPU
// runtimes never report: Budget refuses allocations past a byte budget with
// an error that matches cl.ErrMemObjectAllocationFailure, as a device that
// ran out of memory would, and ErrOutOfMemory; Counting counts allocations
// and frees and reports buffers freed twice or never.
//
// # Out of memory
//
// ErrOutOfMemory is the one sentinel for every out-of-memory refusal of
// clpool: a pool's (mempool.ErrOutOfMemory is the same value), a Budget's
// or an SVMBudget's, and an array's too large for the device's largest
// buffer. Match it with errors.Is. The raw allocators return the runtime's
// *cl.CallError as it is, which does not match it: a pool above reacts to
// its status (cl.ErrMemObjectAllocationFailure, cl.ErrOutOfResources,
// cl.ErrOutOfHostMemory) by freeing what it holds and retrying, and
// refuses with its own out-of-memory error only if that fails.
//
// A buffer goes back through the allocator that handed it out: a Budget's
// Free gives its bytes back to the budget, a Counting's counts the free.
// Code that holds a buffer but not its allocator (an array's Close) calls
// the package function Free, which finds that allocator; releasing the
// buffer directly would leave a Budget short of its bytes for good. Of two
// Frees of one buffer, the second gets ErrFreed, or ErrBeingFreed while
// the first is under way (the first may yet fail and leave the buffer
// allocated, for a retry); Counting counts it a bad free once the first
// frees the buffer.
//
// # Shared virtual memory
//
// SVMAllocator is the same contract for shared virtual memory (cl.SVM,
// OpenCL 2.0), a separate interface since an SVM is not a buffer. NewSVM
// allocates with plain clSVMAlloc, fine-grain or coarse-grain; it refuses
// at construction, with an error matching cl.ErrSVMNotSupported, a context
// whose devices lack what it needs (every OpenCL 1.2 device, Oclgrind
// included). clSVMAlloc reports failure only as NULL, which cl turns into
// an error matching cl.ErrMemObjectAllocationFailure. NewImmediateSVM adds
// a probe to every new allocation: a device fill of its first byte with
// zero, waited for, so that a lazily committing runtime reports an
// out-of-memory at allocation; it changes no data a user could see, as no
// one holds the allocation yet and its contents are undefined. SVMBudget
// is Budget for SVM. Free an SVM only once the commands that use it have
// completed: clSVMFree does not wait. Allocate(0) returns nil, Free(nil)
// does nothing, and a second Free returns ErrFreed, as for buffers. The
// package function Free is for buffers only.
package allocator
