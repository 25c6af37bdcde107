package cl

/*
#include <stdlib.h>
#include "clpool.h"
*/
import "C"

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strings"
	"sync/atomic"
	"unicode"
	"unsafe"
)

// Program is an OpenCL program built for the devices of a context.
type Program struct {
	id       C.cl_program
	ctx      *Context
	released atomic.Bool
}

// argInfoOption makes the runtime keep its kernels' argument
// information (clGetKernelArgInfo), which SetArg checks against.
const argInfoOption = "-cl-kernel-arg-info"

// takesArgument holds the build options that take the next word as their
// argument ("-D NAME", "-I DIR"; "-x LANGUAGE" is clang's, which POCL
// passes on). Options that end with one, quoted or not, are refused: POCL
// crashes on a dangling "-I", Oclgrind hangs on a quoted one, and with any
// flag after it the runtime would take that flag for its argument.
var takesArgument = map[string]bool{"-D": true, "-I": true, "-x": true}

// BuildProgram compiles source for every device of the context, with
// compiler options such as "-cl-fast-relaxed-math" (may be empty). A program
// that does not compile returns a *BuildError that holds the build log and
// matches ErrBuildProgramFailure. A source with a NUL byte is refused with
// ErrInvalidValue, options with one with ErrInvalidBuildOptions, as are
// options whose last word is "-D", "-I" or "-x", read either as POCL reads
// options (split at whitespace, a quote a character: "-D Q=it's -I") or
// as a shell would (quotes group words and are dropped: "-w '-I '"), and
// options with a quoted word of nothing but whitespace or quotes; the
// error quotes the options as given.
//
// Tabs, newlines and the other ASCII whitespace bytes of the options reach
// the runtime as spaces; every other byte as it is. Runtimes differ there:
// NVIDIA's compiler fails on "-D\nX" and "-w -D X\n", Oclgrind on any
// newline, and POCL takes "-w\t-D X" for one unknown option.
//
// It adds -cl-kernel-arg-info to the options (a runtime that refuses it
// builds without), so that the runtime tells its kernels' argument
// qualifiers and SetArg can refuse what would crash it: a number for a
// memory argument, local memory for another (see Kernel.SetArg).
func (c *Context) BuildProgram(source, options string) (*Program, error) {
	cid, err := c.handle("clCreateProgramWithSource")
	if err != nil {
		return nil, err
	}
	// C strings end at a NUL: what follows one would be dropped unseen.
	if strings.IndexByte(source, 0) >= 0 {
		return nil, misuse("clCreateProgramWithSource", ErrInvalidValue, "the source has a NUL byte")
	}
	if strings.IndexByte(options, 0) >= 0 {
		return nil, misuse("clBuildProgram", ErrInvalidBuildOptions, fmt.Sprintf("options %q have a NUL byte", options))
	}
	if why := badOptions(options); why != "" {
		return nil, misuse("clBuildProgram", ErrInvalidBuildOptions, fmt.Sprintf("options %q %s", options, why))
	}
	options = spaced(options)
	if c.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	csrc := C.CString(source)
	defer C.free(unsafe.Pointer(csrc))
	var code C.cl_int
	id := C.clCreateProgramWithSource(cid, 1, &csrc, nil, &code)
	runtime.KeepAlive(c)
	if err := callErr("clCreateProgramWithSource", int32(code)); err != nil {
		return nil, err
	}
	p := &Program{id: id, ctx: c}
	copts := C.CString(options)
	defer C.free(unsafe.Pointer(copts))
	ids := make([]C.cl_device_id, len(c.devices))
	for i, d := range c.devices {
		ids[i] = d.id
	}
	// The flag goes first: an option at the end of the caller's that takes
	// an argument ("-I") would take it as that argument, and the kernels
	// would lose the qualifiers SetArg checks (NVIDIA's driver then takes a
	// number for a buffer's handle and crashes).
	withInfo := C.CString(argInfoOption + " " + options)
	defer C.free(unsafe.Pointer(withInfo))
	code = C.clBuildProgram(id, C.cl_uint(len(ids)), &ids[0], withInfo, nil, nil)
	if Status(code) == ErrInvalidBuildOptions { // a runtime without it (OpenCL 1.1), or the caller's options
		code = C.clBuildProgram(id, C.cl_uint(len(ids)), &ids[0], copts, nil, nil)
	}
	if err := callErr("clBuildProgram", int32(code)); err != nil {
		log := p.buildLog()
		C.clReleaseProgram(id)
		p.released.Store(true)
		return nil, &BuildError{Err: err.(*CallError), Log: log}
	}
	return p, nil
}

// spaced returns options with each ASCII whitespace byte (tab, newline,
// vertical tab, form feed, carriage return) a space; every other byte,
// valid UTF-8 or not, as it is.
func spaced(options string) string {
	b := []byte(options)
	for i, c := range b {
		switch c {
		case '\t', '\n', '\v', '\f', '\r':
			b[i] = ' '
		}
	}
	return string(b)
}

// optionWords reads options as a shell would: words end at whitespace
// outside quotes (single or double), the quotes are dropped, and
// whitespace around what they held is trimmed. It returns the last word,
// and whether a quoted word holds nothing but whitespace and quotes (a
// pair of quotes with nothing, a blank or other quotes between), which
// Oclgrind crashes or hangs on.
func optionWords(options string) (last string, emptyQuote bool) {
	var word strings.Builder
	var quote rune
	inWord, quoted := false, false
	end := func() {
		if inWord {
			last = strings.TrimSpace(word.String())
			emptyQuote = emptyQuote || quoted && strings.TrimFunc(word.String(), blankOrQuote) == ""
			word.Reset()
			inWord, quoted = false, false
		}
	}
	for _, r := range options {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord, quoted = r, true, true
		case unicode.IsSpace(r):
			end()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	end()
	return last, emptyQuote
}

// blankOrQuote reports whether r is whitespace or a quote.
func blankOrQuote(r rune) bool { return unicode.IsSpace(r) || r == '\'' || r == '"' }

// badOptions returns why BuildProgram refuses options, or "". A dangling
// -D, -I or -x is looked for in the last word read both as POCL reads
// the options (split at whitespace only: a quote is a character) and as
// a shell would (optionWords): "-D Q=it's -I" ends with -I for POCL,
// which crashes on it, and "-w '-I '" for a runtime that reads quotes.
func badOptions(options string) string {
	last, emptyQuote := optionWords(options)
	if f := strings.Fields(options); len(f) > 0 && takesArgument[f[len(f)-1]] {
		last = f[len(f)-1] // a quote is a character here: -I" is -I with an argument
	}
	switch {
	case takesArgument[last]:
		return fmt.Sprintf("end with %s and no argument", last)
	case emptyQuote:
		return "have a quoted word of nothing but whitespace or quotes, which Oclgrind crashes or hangs on"
	}
	return ""
}

// buildLog gathers the build logs of the context's devices.
func (p *Program) buildLog() string {
	var logs []string
	for _, d := range p.ctx.devices {
		var n C.size_t
		if C.clGetProgramBuildInfo(p.id, d.id, C.CL_PROGRAM_BUILD_LOG, 0, nil, &n) != 0 || n == 0 {
			continue
		}
		buf := make([]byte, n)
		if C.clGetProgramBuildInfo(p.id, d.id, C.CL_PROGRAM_BUILD_LOG, n, unsafe.Pointer(&buf[0]), nil) != 0 {
			continue
		}
		if s := strings.TrimSpace(cString(buf)); s != "" {
			logs = append(logs, s)
		}
	}
	runtime.KeepAlive(p)
	return strings.Join(logs, "\n")
}

// Release releases the program. It is idempotent. A nil Program returns an
// error matching ErrInvalidProgram.
func (p *Program) Release() error {
	if p == nil {
		return misuse("clReleaseProgram", ErrInvalidProgram, "program is nil")
	}
	if !p.released.CompareAndSwap(false, true) {
		return nil
	}
	if p.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err := callErr("clReleaseProgram", int32(C.clReleaseProgram(p.id)))
	runtime.KeepAlive(p)
	return err
}

// Kernel is an OpenCL kernel. Setting arguments and enqueueing are separate
// calls, so a Kernel must not be used by several goroutines at once; make
// one Kernel per goroutine, or guard it with a lock.
type Kernel struct {
	id       C.cl_kernel
	name     string
	ctx      *Context // the program's
	serial   bool     // see serialMu
	released atomic.Bool
	quals    []argQual // the address qualifiers of the arguments, by index, as asked so far
	local    []int64   // the bytes of the local-memory arguments set, by index (0: none)
	staticOn *Device   // the device static was asked for; nil if none yet
	static   int64     // the local memory the kernel asks of staticOn with no local-memory argument set
	// The memory set as arguments, by index, so that an enqueue refuses
	// one released or freed since (the runtime would use a dangling
	// handle: POCL aborts the process).
	mems []argMem
	vals []any // the values set, by index, for renew
}

// argMem is the memory a kernel argument points to: a buffer or an SVM,
// or neither.
type argMem struct {
	buf *Buffer
	svm *SVM
	off int64 // the offset into svm
}

// argQual is what SetArg knows of an argument's address qualifier.
type argQual uint8

const (
	qualUnasked argQual = iota // not asked yet
	qualUnknown                // the runtime does not say (no kernel-argument info)
	qualLocal                  // __local
	qualGlobal                 // __global or __constant: a pointer to memory
	qualOpaque                 // an image, sampler, pipe or queue: no Go type of SetArg's sets it
	qualOther                  // any other (__private: a value)
)

// opaqueType reports whether an argument of the OpenCL C type called name
// is an object of the runtime's that SetArg has no type for (images,
// samplers, queues, events, reservation ids): the runtime would take the
// value it is given for that object's handle.
func opaqueType(name string) bool {
	name = strings.TrimSpace(name)
	switch {
	case strings.HasPrefix(name, "image"), strings.HasPrefix(name, "sampler_t"),
		strings.HasPrefix(name, "queue_t"), strings.HasPrefix(name, "clk_event_t"),
		strings.HasPrefix(name, "reserve_id_t"):
		return true
	}
	return false
}

// maxArgIndex bounds the arguments a Kernel keeps what it knows of: past
// it (no kernel has so many), SetArg asks, and clSetKernelArg refuses.
const maxArgIndex = 1 << 12

// Kernel makes the kernel called name; a name with a NUL byte is refused
// with ErrInvalidKernelName.
func (p *Program) Kernel(name string) (*Kernel, error) {
	if p == nil || p.released.Load() {
		return nil, misuse("clCreateKernel", ErrInvalidProgram, "program is nil or released")
	}
	if strings.IndexByte(name, 0) >= 0 { // a C string would end at it: another kernel's name
		return nil, misuse("clCreateKernel", ErrInvalidKernelName, fmt.Sprintf("name %q has a NUL byte", name))
	}
	if p.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var code C.cl_int
	id := C.clCreateKernel(p.id, cname, &code)
	runtime.KeepAlive(p)
	if err := callErr("clCreateKernel", int32(code)); err != nil {
		return nil, &CallError{Call: "clCreateKernel", Status: Status(code), Detail: name}
	}
	return &Kernel{id: id, name: name, ctx: p.ctx, serial: p.ctx.serial}, nil
}

// Name returns the kernel's function name; "" for a nil Kernel.
func (k *Kernel) Name() string {
	if k == nil {
		return ""
	}
	return k.name
}

// LocalMem is a kernel argument of local memory of the given byte size,
// which must be positive (else SetArg returns ErrInvalidArgSize). Where the
// runtime tells the arguments' address qualifiers (clGetKernelArgInfo), SetArg
// refuses LocalMem for an argument that is not __local, and any other value
// for one that is, with ErrInvalidArgValue, as the specification says (not
// every runtime checks); an enqueue of a kernel that asks more local memory
// than the device's LocalMemSize (its local-memory arguments and its own
// __local arrays: CL_KERNEL_LOCAL_MEM_SIZE) is refused with
// ErrOutOfResources.
type LocalMem int

// SetArg sets argument i. The value's Go type picks the C type: *Buffer
// (cl_mem), *SVM (a global pointer to its start: SetArgSVMPointer),
// int8/uint8/int16/uint16/int32/uint32/int64/uint64, float32, float64
// (char ... double), and LocalMem (__local memory of that size).
// A buffer must belong to the kernel's context (else ErrInvalidMemObject).
// Where the runtime tells the arguments' qualifiers (programs built by
// BuildProgram), a number for a __global or __constant argument is
// refused with ErrInvalidMemObject, a *Buffer or *SVM for a value
// argument and anything for an image, sampler, pipe or queue argument (no
// Go type sets one) with ErrInvalidArgValue, and LocalMem as LocalMem
// says. An
// enqueue of the kernel after a buffer argument was released (or an SVM
// argument freed) is refused with ErrInvalidMemObject (ErrInvalidValue).
// A buffer set where an SVM pointer was gives the Kernel a new runtime
// kernel of its program, with its other arguments set again: NVIDIA's
// driver refuses every enqueue of the old one (see renew.go).
func (k *Kernel) SetArg(i int, v any) error {
	const call = "clSetKernelArg"
	if k == nil || k.released.Load() {
		return misuse(call, ErrInvalidKernel, "kernel is nil or released")
	}
	if i < 0 || i > math.MaxUint32 { // a cl_uint would wrap it to another argument
		return misuse(call, ErrInvalidArgIndex, fmt.Sprintf("argument %d of %s", i, k.name))
	}
	if err := k.checkQualifier(call, i, v); err != nil {
		return err
	}
	var size uintptr
	var p unsafe.Pointer
	switch x := v.(type) {
	case *Buffer:
		mem, err := x.handle(call)
		if err != nil {
			return err
		}
		if x.ctx != k.ctx {
			return misuse(call, ErrInvalidMemObject, fmt.Sprintf("argument %d of %s: a buffer of another context than the kernel's", i, k.name))
		}
		if i < len(k.mems) && k.mems[i].svm != nil { // see renew.go
			if err := k.renew(call, i); err != nil {
				return err
			}
		}
		size, p = unsafe.Sizeof(mem), unsafe.Pointer(&mem)
	case *SVM:
		return k.SetArgSVMPointer(i, x, 0)
	case LocalMem:
		if x <= 0 { // the spec's CL_INVALID_ARG_SIZE, which not every runtime checks
			return misuse(call, ErrInvalidArgSize, fmt.Sprintf("argument %d of %s: %d bytes of local memory", i, k.name, x))
		}
		size = uintptr(x)
	case int8:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case uint8:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case int16:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case uint16:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case int32:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case uint32:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case int64:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case uint64:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case float32:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	case float64:
		size, p = unsafe.Sizeof(x), unsafe.Pointer(&x)
	default:
		return misuse(call, ErrInvalidArgValue, fmt.Sprintf("argument %d of %s: unsupported Go type %T", i, k.name, v))
	}
	if k.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clSetKernelArg(k.id, C.cl_uint(i), C.size_t(size), p)
	runtime.KeepAlive(k)
	runtime.KeepAlive(v)
	if code != 0 {
		return &CallError{Call: call, Status: Status(code), Detail: fmt.Sprintf("argument %d of %s (%T)", i, k.name, v)}
	}
	k.noteArg(i, v, 0)
	return nil
}

// checkQualifier refuses v for argument i of k if the runtime says the
// argument's address qualifier does not take it: LocalMem for one that is
// not __local, anything else for one that is (the specification's
// CL_INVALID_ARG_VALUE, which not every runtime checks: Oclgrind crashes
// on the first, runs with garbage on the second). A runtime that does not
// say (no kernel-argument info) is left to check.
func (k *Kernel) checkQualifier(call string, i int, v any) error {
	q := k.qualifier(i)
	_, local := v.(LocalMem)
	switch {
	case q == qualOpaque:
		return misuse(call, ErrInvalidArgValue, fmt.Sprintf("argument %d of %s is an image, sampler, pipe or queue, which SetArg cannot set (a %T was given)", i, k.name, v))
	case q == qualGlobal && isNumber(v):
		// The runtime would take the number for a memory object's
		// handle (POCL dereferences it).
		return misuse(call, ErrInvalidMemObject, fmt.Sprintf("argument %d of %s: a %T for a __global or __constant pointer (want *Buffer or *SVM)", i, k.name, v))
	case q == qualOther && isMemory(v):
		// The runtime would take the handle, or the address, for the
		// value of a long or a double.
		return misuse(call, ErrInvalidArgValue, fmt.Sprintf("argument %d of %s: a %T for a value argument (want a number)", i, k.name, v))
	case q == qualUnknown || local == (q == qualLocal):
		return nil
	case local:
		return misuse(call, ErrInvalidArgValue, fmt.Sprintf("argument %d of %s: local memory for an argument that is not __local", i, k.name))
	default:
		return misuse(call, ErrInvalidArgValue, fmt.Sprintf("argument %d of %s: a %T for a __local argument (want LocalMem)", i, k.name, v))
	}
}

// isMemory reports whether v is memory SetArg passes by its handle or
// address: a *Buffer or an *SVM.
func isMemory(v any) bool {
	switch v.(type) {
	case *Buffer, *SVM:
		return true
	}
	return false
}

// isNumber reports whether v is one of the numbers SetArg takes.
func isNumber(v any) bool {
	switch v.(type) {
	case int8, uint8, int16, uint16, int32, uint32, int64, uint64, float32, float64:
		return true
	}
	return false
}

// qualifier returns argument i's address qualifier, asked of the runtime
// once (clGetKernelArgInfo). i is a cl_uint: SetArg and SetArgSVMPointer
// refuse any other.
func (k *Kernel) qualifier(i int) argQual {
	if i < len(k.quals) && k.quals[i] != qualUnasked {
		return k.quals[i]
	}
	q := qualUnknown
	var aq C.cl_kernel_arg_address_qualifier
	var tq C.cl_kernel_arg_type_qualifier
	var name [128]byte
	var nameLen C.size_t
	if k.serial {
		serialMu.Lock()
	}
	code := C.clGetKernelArgInfo(k.id, C.cl_uint(i), C.CL_KERNEL_ARG_ADDRESS_QUALIFIER, C.size_t(unsafe.Sizeof(aq)), unsafe.Pointer(&aq), nil)
	if code == 0 {
		if C.clGetKernelArgInfo(k.id, C.cl_uint(i), C.CL_KERNEL_ARG_TYPE_QUALIFIER, C.size_t(unsafe.Sizeof(tq)), unsafe.Pointer(&tq), nil) != 0 {
			tq = 0
		}
		if C.clGetKernelArgInfo(k.id, C.cl_uint(i), C.CL_KERNEL_ARG_TYPE_NAME, C.size_t(len(name)), unsafe.Pointer(&name[0]), &nameLen) != 0 {
			nameLen = 0
		}
	}
	if k.serial {
		serialMu.Unlock()
	}
	runtime.KeepAlive(k)
	switch {
	case code != 0: // no info, or no argument i: clSetKernelArg answers
	case tq&C.CL_KERNEL_ARG_TYPE_PIPE != 0 || opaqueType(string(name[:max(int(nameLen)-1, 0)])):
		q = qualOpaque
	case aq == C.CL_KERNEL_ARG_ADDRESS_LOCAL:
		q = qualLocal
	case aq == C.CL_KERNEL_ARG_ADDRESS_GLOBAL || aq == C.CL_KERNEL_ARG_ADDRESS_CONSTANT:
		q = qualGlobal
	default:
		q = qualOther
	}
	if i < maxArgIndex {
		if i >= len(k.quals) {
			k.quals = append(k.quals, make([]argQual, i+1-len(k.quals))...)
		}
		k.quals[i] = q
	}
	return q
}

// noteArg notes what argument i of k now is: its value (for renew), the
// local memory it takes (v's bytes if it is LocalMem, else none), and the
// buffer or SVM it points to, if any (see argsLive), off bytes into the
// SVM.
func (k *Kernel) noteArg(i int, v any, off int64) {
	n, ok := v.(LocalMem)
	switch {
	case i >= maxArgIndex: // i is a cl_uint, as SetArg checked
		return
	case ok:
		if i >= len(k.local) {
			k.local = append(k.local, make([]int64, i+1-len(k.local))...)
		}
		k.local[i] = int64(n)
	case i < len(k.local):
		k.local[i] = 0
	}
	if i >= len(k.vals) {
		k.vals = append(k.vals, make([]any, i+1-len(k.vals))...)
	}
	k.vals[i] = v
	m := argMem{off: off}
	m.buf, _ = v.(*Buffer)
	m.svm, _ = v.(*SVM)
	if m != (argMem{}) && i >= len(k.mems) {
		k.mems = append(k.mems, make([]argMem, i+1-len(k.mems))...)
	}
	if i < len(k.mems) {
		k.mems[i] = m
	}
}

// argsLive refuses, for call, an enqueue of k with a buffer argument
// released, or an SVM argument freed, since it was set.
func (k *Kernel) argsLive(call string) error {
	for i, m := range k.mems {
		if m.buf != nil && m.buf.Released() {
			return misuse(call, ErrInvalidMemObject, fmt.Sprintf("argument %d of %s: the buffer was released after SetArg", i, k.name))
		}
	}
	for i, m := range k.mems {
		s := m.svm
		if s == nil {
			continue
		}
		s.mu.Lock()
		freed := s.freed
		s.mu.Unlock()
		if freed {
			return misuse(call, ErrInvalidValue, fmt.Sprintf("argument %d of %s: the SVM was freed after SetArgSVMPointer", i, k.name))
		}
	}
	return nil
}

// localBytes returns the bytes of k's local-memory arguments, saturated
// at math.MaxInt64.
func (k *Kernel) localBytes() int64 {
	var sum int64
	for _, n := range k.local {
		if sum > math.MaxInt64-n {
			return math.MaxInt64
		}
		sum += n
	}
	return sum
}

// localOverflow returns an error matching ErrOutOfResources, for call, if
// k asks more local memory of d than d has: its own __local arrays and its
// local-memory arguments, as the runtime counts them
// (CL_KERNEL_LOCAL_MEM_SIZE), and at least the arguments' sum. A kernel
// with no local-memory argument is asked once per device.
func (k *Kernel) localOverflow(call string, d *Device) error {
	have := d.LocalMemSize
	if have <= 0 {
		return nil
	}
	args := k.localBytes()
	need := k.static
	if args > 0 || k.staticOn != d {
		need = k.askLocal(d)
		if args == 0 {
			k.staticOn, k.static = d, need
		}
	}
	if need = max(need, args); need > have {
		return misuse(call, ErrOutOfResources, fmt.Sprintf("kernel %s: %d bytes of local memory, more than the device's %d", k.name, need, have))
	}
	return nil
}

// askLocal returns the local memory k asks of d now
// (CL_KERNEL_LOCAL_MEM_SIZE); 0 if the runtime does not say.
func (k *Kernel) askLocal(d *Device) int64 {
	var v C.cl_ulong
	if k.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clGetKernelWorkGroupInfo(k.id, d.id, C.CL_KERNEL_LOCAL_MEM_SIZE, C.size_t(unsafe.Sizeof(v)), unsafe.Pointer(&v), nil)
	runtime.KeepAlive(k)
	if code != 0 || v > math.MaxInt64 {
		return 0
	}
	return int64(v)
}

// SetArgs sets the arguments in order, from 0.
func (k *Kernel) SetArgs(args ...any) error {
	for i, a := range args {
		if err := k.SetArg(i, a); err != nil {
			return err
		}
	}
	return nil
}

// Release releases the kernel. It is idempotent. A nil Kernel returns an
// error matching ErrInvalidKernel.
func (k *Kernel) Release() error {
	if k == nil {
		return misuse("clReleaseKernel", ErrInvalidKernel, "kernel is nil")
	}
	if !k.released.CompareAndSwap(false, true) {
		return nil
	}
	if k.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err := callErr("clReleaseKernel", int32(C.clReleaseKernel(k.id)))
	runtime.KeepAlive(k)
	return err
}

// EnqueueKernel runs k over the global work size like EnqueueNDRangeKernel,
// without an event: for in-order queues, where the next command waits anyway.
func (q *CommandQueue) EnqueueKernel(k *Kernel, global, local []int) error {
	ev, err := q.enqueueNDRange(k, nil, global, local, nil, false)
	if ev != nil {
		_ = ev.Release()
	}
	return err
}

// EnqueueNDRangeKernel runs k over the global work size (1 to 3
// dimensions). local may be nil to let the runtime choose; globalOffset may
// be nil. A global size below 1 is ErrInvalidGlobalWorkSize, a local size
// below 1 ErrInvalidWorkGroupSize, a negative offset ErrInvalidGlobalOffset
// (OpenCL 1.2), and a kernel of another context than q's ErrInvalidContext.
func (q *CommandQueue) EnqueueNDRangeKernel(k *Kernel, globalOffset, global, local []int, wait ...*Event) (*Event, error) {
	return q.enqueueNDRange(k, globalOffset, global, local, wait, true)
}

func (q *CommandQueue) enqueueNDRange(k *Kernel, globalOffset, global, local []int, wait []*Event, wantEvent bool) (*Event, error) {
	const call = "clEnqueueNDRangeKernel"
	qid, err := q.handle(call)
	if err != nil {
		return nil, err
	}
	if k == nil || k.released.Load() {
		return nil, misuse(call, ErrInvalidKernel, "kernel is nil or released")
	}
	if k.ctx != q.ctx {
		return nil, misuse(call, ErrInvalidContext, fmt.Sprintf("kernel %s belongs to another context than the queue", k.name))
	}
	dims := len(global)
	if dims < 1 || dims > 3 || (local != nil && len(local) != dims) || (globalOffset != nil && len(globalOffset) != dims) {
		return nil, misuse(call, ErrInvalidWorkDimension, fmt.Sprintf("global %v, local %v, offset %v", global, local, globalOffset))
	}
	if err := k.localOverflow(call, q.Device()); err != nil {
		return nil, err // the specification's CL_OUT_OF_RESOURCES; POCL aborts the process instead
	}
	if err := k.argsLive(call); err != nil {
		return nil, err
	}
	if err := workItems(call, global); err != nil {
		return nil, err
	}
	list, n, err := waitList(call, q.ctx, wait)
	if err != nil {
		return nil, err
	}
	var g, l, o [3]C.size_t
	var lp, op *C.size_t
	for i := 0; i < dims; i++ {
		switch {
		case global[i] < 1:
			return nil, misuse(call, ErrInvalidGlobalWorkSize, fmt.Sprintf("global %v: every size must be at least 1", global))
		case local != nil && local[i] < 1:
			return nil, misuse(call, ErrInvalidWorkGroupSize, fmt.Sprintf("local %v: every size must be at least 1", local))
		case globalOffset != nil && globalOffset[i] < 0:
			return nil, misuse(call, ErrInvalidGlobalOffset, fmt.Sprintf("negative offset %v", globalOffset))
		}
		g[i] = C.size_t(global[i])
		if local != nil {
			l[i] = C.size_t(local[i])
			lp = &l[0]
		}
		if globalOffset != nil {
			o[i] = C.size_t(globalOffset[i])
			op = &o[0]
		}
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var ev C.cl_event
	evp := &ev
	if !wantEvent {
		evp = nil
	}
	code := C.clEnqueueNDRangeKernel(qid, k.id, C.cl_uint(dims), op, &g[0], lp, n, list, evp)
	runtime.KeepAlive(q)
	runtime.KeepAlive(k)
	runtime.KeepAlive(wait)
	if code != 0 {
		return nil, &CallError{Call: call, Status: Status(code), Detail: fmt.Sprintf("kernel %s, global %v, local %v", k.name, global, local)}
	}
	if !wantEvent {
		return nil, nil
	}
	return q.newEvent(ev, nil), nil
}

// workItems checks that the work-items of global, each size at least 1,
// number fewer than 2^64: their product wraps to 0 in a size_t past it,
// and POCL aborts the process at the wait (Oclgrind runs out of memory)
// where the specification gives CL_INVALID_GLOBAL_WORK_SIZE.
func workItems(call string, global []int) error {
	n := uint64(1)
	for _, g := range global {
		if g < 1 {
			return nil // the loop over the sizes refuses it
		}
		hi, lo := bits.Mul64(n, uint64(g))
		if hi != 0 {
			return misuse(call, ErrInvalidGlobalWorkSize, fmt.Sprintf("global %v: 2^64 work-items or more", global))
		}
		n = lo
	}
	return nil
}
