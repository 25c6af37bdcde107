// Package array is 1-D device arrays whose memory, temporaries included,
// comes from the allocator they are given, as pyopencl.array does with its
// allocator argument.
//
//	x, err := array.Zeros[float32](q, n, pool.Allocate)  // from a mempool.Pool
//	y, err := array.Zeros[float32](q, n, imm.Allocate)   // from a raw allocator
//	z, err := array.Axpy(2, x, x)                          // z uses x's allocator
//	s, err := array.Dot(x, z)                              // so do the reduction's buffers
//	x.Close(); z.Close()                                   // back to the pool
//
// # The allocator argument
//
// pool.Allocate returns a *mempool.PooledBuffer, a raw allocator's Allocate a
// *cl.Buffer. Constructors take any func(int64) (B, error) whose B is a
// Block (a Buffer and a Close method), which both are, so the same short
// expression works for either with no adapter. Type inference finds B from
// the argument; only the element type is written. A small func type was
// preferred to an interface because pool.Allocate is a method value: an
// interface would need the pool itself, and would exclude plain functions
// (a counting or logging wrapper is a closure). Each array keeps its
// allocator as an Alloc, and every result and temporary of an operation on
// it is allocated with it.
//
// Memory goes back through the allocator it came from: a pooled block to
// its pool, and a raw allocator's *cl.Buffer through allocator.Free, which
// runs the Free of the allocator.Budget or allocator.Counting that handed
// it out (a Budget then gets its bytes back, a Counting counts the free).
//
// # Shared virtual memory
//
// Arrays may live in shared virtual memory (cl.SVM, OpenCL 2.0) instead
// of buffers. A raw SVM allocator (allocator.NewSVM, NewImmediateSVM, an
// SVMBudget) is passed through SVMAlloc, which makes each allocation a
// Block and frees it through the allocator at the array's last Close; the
// Allocate of a pool over SVM (mempool.NewSVM) passes as it is:
//
//	svm, err := allocator.NewSVM(q.Context(), false)           // coarse grain
//	x, err := array.Zeros[float32](q, n, array.SVMAlloc(svm))  // each array its own SVM
//	y, err := array.Zeros[float32](q, n, svmPool.Allocate)     // or blocks of a pool's SVM
//
// Such a Block is SVMBased: its bytes start at Offset in an SVM. Every
// call works on SVM arrays as on buffer arrays, coarse grain or fine,
// views included, and one operation may mix arrays of both kinds (x in a
// buffer, y in SVM); its result comes from the first operand's allocator,
// as always. Kernels take the SVM pointer to the allocation's start where
// they take a buffer, and the element index next to it, as for a view or
// an arena's block: the same kernels serve both. Transfers to and from
// the host are blocking clEnqueueSVMMemcpy calls with a host pointer
// (cl.CommandQueue.ReadSVM and WriteSVM), so coarse-grain SVM needs no
// map. Copy copies SVM to SVM with clEnqueueSVMMemcpy, and between a
// buffer and SVM with a copy kernel, OpenCL having no command for it.
// Buffer returns nil for an SVM array; SVM returns its allocation.
//
// clSVMFree, unlike the release of a buffer, does not wait for the
// commands that use the memory, so the Close that frees a block of
// SVMAlloc waits for the array's queue first (clFinish). SVM needs
// devices that support it; elsewhere, as on Oclgrind (OpenCL 1.2),
// allocator.NewSVM fails with cl.ErrSVMNotSupported.
//
// # The default allocator
//
// A constructor given no allocator, a nil one, uses the package's default,
// as CuPy's arrays use the allocator of cupy.cuda.set_allocator.
// SetDefaultAllocator sets it (taking pool.Allocate or a raw allocator's
// Allocate, as constructors do) and returns the previous one;
// DefaultAllocator returns it. Both are safe for concurrent use. Go cannot
// infer a constructor's block type from a bare nil, so nil is written
// array.Alloc(nil), or with the type arguments spelled out:
//
//	prev := array.SetDefaultAllocator(pool.Allocate)
//	defer array.SetDefaultAllocator(prev)
//	x, err := array.Zeros[float32](q, n, array.Alloc(nil))   // from the pool
//	y, err := array.Zeros[float32, array.Block](q, n, nil)   // the same
//
// Out of the box (and after SetDefaultAllocator(array.Alloc(nil))) the
// default is a plain read-write buffer of the queue's context for each
// array, released at Close, as pyopencl.array allocates without an
// allocator. It is not a pool, as CuPy's default is, on purpose: a global
// pool would hold device memory for the life of the process, for every
// context a program ever used, out of the reach of the code that owns the
// contexts; and a pool for one context cannot serve arrays of another. Set
// a pool as the default for that. The default is read when an array is
// made: the array's results and temporaries keep using it after the
// default changes. An allocator whose memory is not in the queue's context
// (a pool of another context, set as the default) is refused with
// ErrContextMismatch.
//
// # Errors
//
// Lengths are checked before the allocator is asked: a negative length, or
// one whose bytes exceed the device's largest buffer (MaxMemAllocSize; also
// where they would overflow int64), is an error matching
// cl.ErrInvalidBufferSize. A length too large for the device also matches
// allocator.ErrOutOfMemory, which is mempool.ErrOutOfMemory, as a pool's
// refusal of the same size does (torch raises its OutOfMemoryError there
// too); so does a refusal of the allocator, a pool's or a Budget's, which
// the error of the call wraps. A nil *Array is an error (ErrNilArray) for
// every call that returns one, and a nil queue one matching
// cl.ErrInvalidCommandQueue. Errors say "array:" once, then the call that
// failed and, where it takes several arrays, the operand, as in
// "array: IAdd: y has 11 elements, x has 10: lengths differ"; match the
// sentinels (ErrClosed, ErrLengthMismatch, ...) with errors.Is. An array's
// queue must be in order: an out-of-order one (cl.QueueOutOfOrder) is
// refused with an error matching cl.ErrInvalidCommandQueue, as each
// operation's commands are enqueued one after the other with no events.
//
// # Kernels
//
// The element-wise kernels (Add, Sub, Mul, Div, Scale, Axpy, Tridiag, Fill,
// and the in-place I... methods) and the two-stage reductions (Sum, Dot,
// Max, Min) are built once per context and element type, on first use, and
// shared by all goroutines, until the context is released (cl.Context's
// Release releases them; a queue made by cl.DefaultQueue releases its
// context with it) or ReleaseKernels drops them. Operations on a released
// context fail: the kernels cannot be built again there.
//
// Max and Min of floating-point arrays propagate NaN as numpy's max and
// min do: one NaN element makes the result NaN.
//
// # Views
//
// Slice returns a view: an array over a window of another's memory, as
// x[lo:hi] is of a Go slice. Every operation takes views; each kernel gets
// the window's offset. Views share memory, so an in-place update whose
// receiver overlaps an operand at another offset (x.IAdd(y) with y one
// element past x in the same array) is refused with ErrOverlap; the
// work-items would otherwise read elements their neighbours have already
// written. pyopencl.array views keep their base alive through Python's
// reference counting; here the array and its views share a count of open
// arrays, and the memory goes back to the allocator at the last Close, in
// whatever order they come.
//
// # Queues
//
// An array lives on the queue it was made on, and every operation enqueues
// its kernels there. Its memory is for that queue: pass pool.On(q).Allocate
// for arrays on q. A block allocated for another queue (pool.Allocate
// allocates on the allocator's queue) costs a marker and a barrier: q
// waits for the commands enqueued on the block's queue before it, which
// may still use the block's memory for its previous owner. The block
// records q too (RecordQueue), so the pool reuses it only after the
// array's commands on q, whichever queue asks next. Closing an array
// right after its last operation is enqueued is legal. An operation whose
// operands live on different queues is refused with ErrQueueMismatch
// rather than ordered. The package has no copy across queues: to combine
// them, read one operand back (Get) and make it anew on the other's queue
// (FromHost).
//
// # Lifetimes
//
// Close gives an array's memory back (at the last Close of the array and
// its views). Arrays over a pool that are dropped
// without Close come back after garbage collection, as pooled buffers do;
// arrays over a raw allocator (SVMAlloc included), or the built-in
// default, free their memory only in Close. An Array is for one goroutine at a time.
package array
