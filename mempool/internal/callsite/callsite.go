// Package callsite names where in a program a call into clpool came
// from: the frames of a stack outside clpool's own packages, in CuPy's
// file:line:function form. memhooks' line profile and the mempool
// sanitizer's findings both name sites with it.
package callsite

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
)

// Frame is one frame of a stack.
type Frame struct {
	Fn, File string
	Line     int
}

// String is CuPy's file:line:function form, with the file's base name and
// the function's package name but not its import path.
func (f Frame) String() string {
	return fmt.Sprintf("%s:%d:%s", filepath.Base(f.File), f.Line, f.Fn[strings.LastIndexByte(f.Fn, '/')+1:])
}

// ownPackages are the packages whose frames a site leaves out: clpool's
// own, which are how the memory was asked for, not where.
var ownPackages = []string{
	"github.com/clpool/clpool/mempool.", "github.com/clpool/clpool/mempool/memhooks.",
	"github.com/clpool/clpool/array.", "github.com/clpool/clpool/allocator.",
	"github.com/clpool/clpool/cl.", "github.com/clpool/clpool/trace.",
	// Not clpool's, but above the user's code: the tree starts at main.main,
	// or at the test function.
	"runtime.", "testing.",
}

// own reports whether f is a frame a site leaves out.
func own(f runtime.Frame) bool {
	for _, p := range ownPackages {
		if strings.HasPrefix(f.Function, p) {
			return true
		}
	}
	return f.Function == "" || filepath.Base(f.File) == "_testmain.go"
}

// Frames returns the frames of the program counters pcs (from
// runtime.Callers), innermost first, without clpool's.
func Frames(pcs []uintptr) []Frame {
	var out []Frame
	if len(pcs) == 0 {
		return out
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if !own(f) {
			out = append(out, Frame{Fn: f.Function, File: f.File, Line: f.Line})
		}
		if !more {
			return out
		}
	}
}

// Callers returns the stack of the calling goroutine, innermost first,
// without clpool's frames. skip is runtime.Callers': 1 is Callers' caller.
func Callers(skip int) []Frame {
	pcs := make([]uintptr, 64)
	return Frames(pcs[:runtime.Callers(skip+1, pcs)])
}

// First returns the innermost frame of pcs outside clpool, as String
// writes it: the site of a call into clpool. It returns "" if there is
// none.
func First(pcs []uintptr) string {
	if len(pcs) == 0 {
		return ""
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if !own(f) {
			return Frame{Fn: f.Function, File: f.File, Line: f.Line}.String()
		}
		if !more {
			return ""
		}
	}
}
