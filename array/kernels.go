package array

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/clpool/clpool/cl"
)

// kernelSource is the OpenCL C of every operation, for one element type T.
// Each array argument comes as a buffer or an SVM pointer to the start of
// its allocation, and the index of the array's first element there (zo
// for z, and so on: views start past 0); run passes an array's ptr as the
// two. Element-wise kernels take z (the result) first and may be given
// z == x for an in-place update. Reductions are two-stage: each
// work-group folds a strided share of the input into out[group]; the same
// kernel then folds those partial results in one group.
const kernelSource = `
%s
typedef %s T;
#define LOWEST (%s)
#define HIGHEST (%s)
#define ISNAN(v) (%s)

kernel void fill(global T *z, long zo, T a, long n) {
	long i = get_global_id(0);
	if (i < n) z[zo + i] = a;
}
kernel void copy(global T *z, long zo, global const T *x, long xo, long n) {
	long i = get_global_id(0);
	if (i < n) z[zo + i] = x[xo + i];
}
kernel void arange(global T *z, long zo, T start, T step, long n) {
	long i = get_global_id(0);
	if (i < n) z[zo + i] = start + (T)i * step;
}
#define BINARY(NAME, OP) \
kernel void NAME(global T *z, long zo, global const T *x, long xo, global const T *y, long yo, long n) { \
	long i = get_global_id(0); \
	if (i < n) z[zo + i] = x[xo + i] OP y[yo + i]; \
}
BINARY(add, +)
BINARY(sub, -)
BINARY(mul, *)
BINARY(div_, /)
kernel void scale(global T *z, long zo, T a, global const T *x, long xo, long n) {
	long i = get_global_id(0);
	if (i < n) z[zo + i] = a * x[xo + i];
}
kernel void axpy(global T *z, long zo, T a, global const T *x, long xo, global const T *y, long yo, long n) {
	long i = get_global_id(0);
	if (i < n) z[zo + i] = a * x[xo + i] + y[yo + i];
}
kernel void tridiag(global T *z, long zo, T lower, T diag, T upper, global const T *x, long xo, long n) {
	long i = get_global_id(0);
	if (i >= n) return;
	x += xo;
	T v = diag * x[i];
	if (i > 0) v += lower * x[i - 1];
	if (i + 1 < n) v += upper * x[i + 1];
	z[zo + i] = v;
}

#define PLUS(a, b) ((a) + (b))
#define REDUCE(NAME, INIT, MAP, OP) \
kernel void NAME(global T *out, long oo, global const T *x, long xo, global const T *y, long yo, long n, local T *s) { \
	long lid = get_local_id(0); \
	x += xo; \
	y += yo; \
	T acc = INIT; \
	for (long i = get_global_id(0); i < n; i += get_global_size(0)) acc = OP(acc, MAP); \
	s[lid] = acc; \
	barrier(CLK_LOCAL_MEM_FENCE); \
	for (long k = get_local_size(0) / 2; k > 0; k /= 2) { \
		if (lid < k) s[lid] = OP(s[lid], s[lid + k]); \
		barrier(CLK_LOCAL_MEM_FENCE); \
	} \
	if (lid == 0) out[oo + get_group_id(0)] = s[0]; \
}
REDUCE(rsum, (T)0, x[i], PLUS)
REDUCE(rdot, (T)0, x[i] * y[i], PLUS)
// MAX and MIN propagate NaN, as numpy's max and min do: once a NaN is
// the accumulator it stays, and a NaN operand replaces it (a > NaN is
// false). OpenCL C's max and min leave NaN operands undefined.
#define MAX(a, b) ((ISNAN(a) || (a) > (b)) ? (a) : (b))
#define MIN(a, b) ((ISNAN(a) || (a) < (b)) ? (a) : (b))
REDUCE(rmax, LOWEST, x[i], MAX)
REDUCE(rmin, HIGHEST, x[i], MIN)
`

// kernelNames are the kernels of kernelSource.
var kernelNames = []string{"fill", "copy", "arange", "add", "sub", "mul", "div_", "scale", "axpy", "tridiag", "rsum", "rdot", "rmax", "rmin"}

// clType describes an element type to the OpenCL compiler: its name, its
// least and greatest values, the test for NaN of a value v (0 for
// integers, which have none) and the pragma it needs.
type clType struct {
	name, lowest, highest string
	isnan                 string
	pragma                string
}

func typeOf[T Elem]() clType {
	var z T
	switch any(z).(type) {
	case float32:
		return clType{"float", "-INFINITY", "INFINITY", "isnan(v)", ""}
	case float64:
		return clType{"double", "-INFINITY", "INFINITY", "isnan(v)", "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"}
	case int32:
		return clType{"int", "INT_MIN", "INT_MAX", "0", ""}
	case int64:
		return clType{"long", "LONG_MIN", "LONG_MAX", "0", ""}
	default: // uint32
		return clType{"uint", "0", "UINT_MAX", "0", ""}
	}
}

// guardedKernel is a kernel with the lock that keeps one goroutine's
// arguments from mixing with another's between SetArgs and the enqueue
// (the runtime copies the arguments at the enqueue).
type guardedKernel struct {
	mu       sync.Mutex // serializes the setting of k's arguments and k's enqueue, and its release
	k        *cl.Kernel
	released bool // ReleaseKernels released k: look the kernels up again
}

type kernelSet struct {
	prog    *cl.Program
	kernels map[string]*guardedKernel
}

type setKey struct {
	ctx  *cl.Context
	elem string
}

// built holds the kernels built so far, per context and element type,
// until the context is released (or ReleaseKernels).
var built = struct {
	mu     sync.Mutex // protects the following; held while a set is built, so that each is built once
	sets   map[setKey]*kernelSet
	hooked map[*cl.Context]bool // contexts whose Release releases their sets (cl.Context.OnRelease)
}{sets: map[setKey]*kernelSet{}, hooked: map[*cl.Context]bool{}}

// kernelsFor returns the kernels for T in ctx, building them the first
// time. The first set built for ctx registers forgetContext with ctx, so
// that releasing ctx releases its kernels: a program holds its context,
// and a cache that kept programs for good would keep every context a
// program made arrays on alive (NVIDIA then refuses new contexts with
// CL_OUT_OF_HOST_MEMORY after some dozens).
func kernelsFor[T Elem](ctx *cl.Context) (*kernelSet, error) {
	t := typeOf[T]()
	key := setKey{ctx, t.name}
	built.mu.Lock()
	defer built.mu.Unlock()
	if ks := built.sets[key]; ks != nil {
		return ks, nil
	}
	prog, err := ctx.BuildProgram(fmt.Sprintf(kernelSource, t.pragma, t.name, t.lowest, t.highest, t.isnan), "")
	if err != nil {
		return nil, fmt.Errorf("building the %s kernels: %w", t.name, err)
	}
	ks := &kernelSet{prog: prog, kernels: map[string]*guardedKernel{}}
	for _, name := range kernelNames {
		k, err := prog.Kernel(name)
		if err != nil {
			ks.release()
			return nil, err
		}
		ks.kernels[name] = &guardedKernel{k: k}
	}
	if !built.hooked[ctx] {
		if err := ctx.OnRelease(func() { forgetContext(ctx) }); err != nil {
			ks.release() // ctx was released meanwhile
			return nil, err
		}
		built.hooked[ctx] = true
	}
	built.sets[key] = ks
	return ks, nil
}

// forgetContext releases ctx's kernels and forgets ctx; ctx's Release
// calls it.
func forgetContext(ctx *cl.Context) {
	built.mu.Lock()
	defer built.mu.Unlock()
	releaseKernelsLocked(ctx)
	delete(built.hooked, ctx)
}

// release releases the kernels, each under its lock (an operation may be
// setting its arguments), then the program.
func (ks *kernelSet) release() {
	for _, k := range ks.kernels {
		k.mu.Lock()
		_ = k.k.Release()
		k.released = true
		k.mu.Unlock()
	}
	_ = ks.prog.Release()
}

// ReleaseKernels releases the kernels built for ctx; releasing ctx does
// it too. Arrays used on ctx afterwards build them again. An operation
// running at the same time finishes with the kernels it took, or builds
// them again.
func ReleaseKernels(ctx *cl.Context) {
	built.mu.Lock()
	defer built.mu.Unlock()
	releaseKernelsLocked(ctx)
}

func releaseKernelsLocked(ctx *cl.Context) {
	for key, ks := range built.sets {
		if key.ctx == ctx {
			ks.release()
			delete(built.sets, key)
		}
	}
}

// elementGroup is the work-group size of the element-wise kernels, as
// reduceGroup is the reductions': fixed, so that a runtime that builds a
// kernel for each work-group size it runs with (POCL specializes on it)
// builds each kernel once, whatever the arrays' lengths. The kernels skip
// the work-items past their length.
const elementGroup = 64

// run sets the arguments of the kernel called name and enqueues it over
// global work-items in groups of local, for the exported call op, whose
// name its errors carry; a nil local runs groups of elementGroup over
// global rounded up to a multiple of it. An array is passed as its ptr,
// which is two of the kernel's arguments, and kept reachable until the
// kernel is enqueued (see ptr).
func run[T Elem](op string, q *cl.CommandQueue, name string, global int, local []int, args ...any) error {
	if local == nil {
		local = []int{elementGroup}
		global = (global + elementGroup - 1) / elementGroup * elementGroup
	}
	gk, err := lockKernel[T](q.Context(), name)
	if err != nil {
		return fmt.Errorf("array: %s: %w", op, err)
	}
	defer gk.mu.Unlock()
	if err := gk.k.SetArgs(kernelArgs(args)...); err != nil {
		return fmt.Errorf("array: %s: kernel %s: %w", op, name, err)
	}
	err = q.EnqueueKernel(gk.k, []int{global}, local)
	runtime.KeepAlive(args) // the arrays' blocks, by their ptrs, until the kernel is enqueued
	if err != nil {
		return fmt.Errorf("array: %s: kernel %s: %w", op, name, err)
	}
	return nil
}

// lockKernel returns the kernel called name of T's kernels for ctx,
// locked. A kernel ReleaseKernels released after the lookup is looked up
// again (its set is gone, so kernelsFor builds a new one); that happens
// only while another goroutine calls ReleaseKernels on ctx, so the loop
// ends once it stops, and after maxKernelLookups tries at most.
func lockKernel[T Elem](ctx *cl.Context, name string) (*guardedKernel, error) {
	for range maxKernelLookups {
		ks, err := kernelsFor[T](ctx)
		if err != nil {
			return nil, err
		}
		gk := ks.kernels[name]
		gk.mu.Lock()
		if !gk.released {
			return gk, nil
		}
		gk.mu.Unlock()
	}
	return nil, fmt.Errorf("kernel %s: released by ReleaseKernels %d times while in use", name, maxKernelLookups)
}

// maxKernelLookups bounds lockKernel's tries.
const maxKernelLookups = 100
