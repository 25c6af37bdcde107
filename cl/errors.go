package cl

import "strconv"

//go:generate bash gen_status.sh

// Status is an OpenCL status code (cl_int). Every non-zero Status is an error
// that prints its name and number, such as "CL_OUT_OF_RESOURCES (-5)".
type Status int32

// Error returns the status's name and number.
func (s Status) Error() string {
	return s.Name() + " (" + strconv.Itoa(int(s)) + ")"
}

// Name returns the status's name as the specification spells it, or
// "CL_UNKNOWN_STATUS" for a code the specification does not define.
func (s Status) Name() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "CL_UNKNOWN_STATUS"
}

// IsOutOfMemory reports whether s is one of the three codes a runtime uses
// for exhausted memory: CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES
// or CL_OUT_OF_HOST_MEMORY.
func (s Status) IsOutOfMemory() bool {
	return s == ErrMemObjectAllocationFailure || s == ErrOutOfResources || s == ErrOutOfHostMemory
}

// CallError is the error of a failing OpenCL call: the C function's name and
// the Status it returned. It unwraps to the Status, so
// errors.Is(err, cl.ErrInvalidValue) works through any further wrapping.
type CallError struct {
	Call   string // the C function, such as "clCreateBuffer"
	Status Status
	Detail string // what the caller asked for, when it helps; may be empty
}

// Error returns "call: STATUS (n)", followed by the detail if there is one.
func (e *CallError) Error() string {
	s := e.Call + ": " + e.Status.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the Status.
func (e *CallError) Unwrap() error { return e.Status }

// BuildError is the error of a program that failed to build. It unwraps to
// the CallError of clBuildProgram (and so to ErrBuildProgramFailure) and
// carries the compiler's log.
type BuildError struct {
	Err *CallError
	Log string // the build log of the device(s), as the compiler wrote it
}

// Error returns the failing call followed by the build log.
func (e *BuildError) Error() string { return e.Err.Error() + "\nbuild log:\n" + e.Log }

// Unwrap returns the CallError.
func (e *BuildError) Unwrap() error { return e.Err }

// callErr returns nil for CL_SUCCESS and a *CallError otherwise.
func callErr(call string, code int32) error {
	if code == 0 {
		return nil
	}
	return &CallError{Call: call, Status: Status(code)}
}

// misuse is the error of a call made on a released object or with arguments
// that cannot be passed to the C API; it never reaches the driver.
func misuse(call string, s Status, detail string) error {
	return &CallError{Call: call, Status: s, Detail: detail}
}
