package array

import "fmt"

// Element-wise operations. Each returns a new array from x's allocator, or
// updates its receiver in place (the I... methods). Operands must be open,
// of one context and of one length, and may be views (see Slice); an
// in-place update whose receiver overlaps an operand at another offset of
// the same memory is refused with ErrOverlap. Each passes its own name
// (Add, IAdd) to the kernel it runs (add), for its errors.

// Add returns x + y.
func Add[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("Add", "add", x, y) }

// Sub returns x - y.
func Sub[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("Sub", "sub", x, y) }

// Mul returns x * y, element by element.
func Mul[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("Mul", "mul", x, y) }

// Div returns x / y, element by element (integer division for integers;
// dividing by zero is undefined there, as in OpenCL C).
func Div[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("Div", "div_", x, y) }

// IAdd sets x to x + y.
func (x *Array[T]) IAdd(y *Array[T]) error { return binaryInPlace("IAdd", "add", x, y) }

// ISub sets x to x - y.
func (x *Array[T]) ISub(y *Array[T]) error { return binaryInPlace("ISub", "sub", x, y) }

// IMul sets x to x * y.
func (x *Array[T]) IMul(y *Array[T]) error { return binaryInPlace("IMul", "mul", x, y) }

// IDiv sets x to x / y.
func (x *Array[T]) IDiv(y *Array[T]) error { return binaryInPlace("IDiv", "div_", x, y) }

func binary[T Elem](op, kernel string, x, y *Array[T]) (*Array[T], error) {
	if err := check(op, operand[T]{"x", x}, operand[T]{"y", y}); err != nil {
		return nil, err
	}
	return result(op, x, func(z *Array[T]) error { return z.enqueueBinary(op, kernel, x, y) })
}

func binaryInPlace[T Elem](op, kernel string, x, y *Array[T]) error {
	if err := checkInPlace(op, operand[T]{"x", x}, operand[T]{"y", y}); err != nil {
		return err
	}
	return x.enqueueBinary(op, kernel, x, y)
}

// enqueueBinary sets z to x op y, with the kernel of that name.
func (z *Array[T]) enqueueBinary(op, kernel string, x, y *Array[T]) error {
	if z.n == 0 {
		return nil
	}
	return run[T](op, z.q, kernel, z.n, nil, z.ptr(), x.ptr(), y.ptr(), int64(z.n))
}

// Scale returns a·x.
func Scale[T Elem](a T, x *Array[T]) (*Array[T], error) {
	if err := check("Scale", self(x)); err != nil {
		return nil, err
	}
	return result("Scale", x, func(z *Array[T]) error { return z.enqueueScale("Scale", a, x) })
}

// IScale sets x to a·x.
func (x *Array[T]) IScale(a T) error {
	if err := check("IScale", self(x)); err != nil {
		return err
	}
	return x.enqueueScale("IScale", a, x)
}

func (z *Array[T]) enqueueScale(op string, a T, x *Array[T]) error {
	if z.n == 0 {
		return nil
	}
	return run[T](op, z.q, "scale", z.n, nil, z.ptr(), a, x.ptr(), int64(z.n))
}

// Axpy returns a·x + y.
func Axpy[T Elem](a T, x, y *Array[T]) (*Array[T], error) {
	if err := check("Axpy", operand[T]{"x", x}, operand[T]{"y", y}); err != nil {
		return nil, err
	}
	return result("Axpy", x, func(z *Array[T]) error { return z.enqueueAxpy("Axpy", a, x, y) })
}

// IAxpy sets y to a·x + y.
func (y *Array[T]) IAxpy(a T, x *Array[T]) error {
	if err := checkInPlace("IAxpy", operand[T]{"y", y}, operand[T]{"x", x}); err != nil {
		return err
	}
	return y.enqueueAxpy("IAxpy", a, x, y)
}

func (z *Array[T]) enqueueAxpy(op string, a T, x, y *Array[T]) error {
	if z.n == 0 {
		return nil
	}
	return run[T](op, z.q, "axpy", z.n, nil, z.ptr(), a, x.ptr(), y.ptr(), int64(z.n))
}

// Tridiag returns the product of x with the tridiagonal matrix of constant
// diagonals: z[i] = lower·x[i-1] + diag·x[i] + upper·x[i+1], with the
// elements past the ends taken as zero. Tridiag(-1, 2, -1, x) applies the
// 1-D Poisson (Laplace) operator.
func Tridiag[T Elem](lower, diag, upper T, x *Array[T]) (*Array[T], error) {
	if err := check("Tridiag", self(x)); err != nil {
		return nil, err
	}
	return result("Tridiag", x, func(z *Array[T]) error {
		return run[T]("Tridiag", z.q, "tridiag", z.n, nil, z.ptr(), lower, diag, upper, x.ptr(), int64(z.n))
	})
}

// Fill sets every element to v.
func (x *Array[T]) Fill(v T) error {
	if err := check("Fill", self(x)); err != nil {
		return err
	}
	return x.fill("Fill", v)
}

func (x *Array[T]) fill(op string, v T) error {
	if x.n == 0 {
		return nil
	}
	return run[T](op, x.q, "fill", x.n, nil, x.ptr(), v, int64(x.n))
}

// result makes op's result: a new array like x, from x's allocator, that
// compute fills in (unless it is empty). The array is closed if compute
// fails.
func result[T Elem](op string, x *Array[T], compute func(z *Array[T]) error) (*Array[T], error) {
	z, err := newArray[T](op, x.q, x.n, x.alloc)
	if err != nil || z.n == 0 {
		return z, err
	}
	if err := compute(z); err != nil {
		z.Close()
		return nil, err
	}
	return z, nil
}

// Reductions run in two stages (kernels rsum, rdot, rmax, rmin: "dot" is an
// OpenCL C built-in) on the device. The first folds the input
// into one partial result per work-group, in a buffer from x's allocator;
// the second folds those into a one-element buffer, also from x's allocator,
// which is then read back.

const (
	reduceGroup  = 64 // work-items per group; a power of two
	reduceGroups = 64 // groups in the first stage, at most
)

// Sum returns the sum of the elements (0 for an empty array).
func Sum[T Elem](x *Array[T]) (T, error) {
	if err := check("Sum", self(x)); err != nil {
		return 0, err
	}
	return reduce("Sum", "rsum", "rsum", x, x)
}

// Dot returns the sum of x[i]·y[i].
func Dot[T Elem](x, y *Array[T]) (T, error) {
	if err := check("Dot", operand[T]{"x", x}, operand[T]{"y", y}); err != nil {
		return 0, err
	}
	return reduce("Dot", "rdot", "rsum", x, y)
}

// Max returns the largest element; ErrEmpty for an empty array. For
// floating-point elements, the result is NaN if any element is NaN, as
// numpy's max gives, even next to +Inf (where math.Max gives +Inf).
func Max[T Elem](x *Array[T]) (T, error) { return extreme("Max", "rmax", x) }

// Min returns the smallest element; ErrEmpty for an empty array. For
// floating-point elements, the result is NaN if any element is NaN, as
// numpy's min gives, even next to -Inf.
func Min[T Elem](x *Array[T]) (T, error) { return extreme("Min", "rmin", x) }

func extreme[T Elem](op, kernel string, x *Array[T]) (T, error) {
	if err := check(op, self(x)); err != nil {
		return 0, err
	}
	if x.n == 0 {
		return 0, fmt.Errorf("array: %s: %w", op, ErrEmpty)
	}
	return reduce(op, kernel, kernel, x, x)
}

// reduce runs the two stages, first and second, of the reduction op over
// x and y (checked already), and downloads the result.
func reduce[T Elem](op, first, second string, x, y *Array[T]) (T, error) {
	if x.n == 0 {
		return 0, nil
	}
	groups := min(reduceGroups, (x.n+reduceGroup-1)/reduceGroup)
	partial, err := newArray[T](op, x.q, groups, x.alloc)
	if err != nil {
		return 0, err
	}
	defer partial.Close()
	result, err := newArray[T](op, x.q, 1, x.alloc)
	if err != nil {
		return 0, err
	}
	defer result.Close()
	local := []int{reduceGroup}
	scratch := localMem[T](reduceGroup)
	if err := run[T](op, x.q, first, groups*reduceGroup, local, partial.ptr(), x.ptr(), y.ptr(), int64(x.n), scratch); err != nil {
		return 0, err
	}
	if err := run[T](op, x.q, second, reduceGroup, local, result.ptr(), partial.ptr(), partial.ptr(), int64(groups), scratch); err != nil {
		return 0, err
	}
	out, err := result.get(op)
	if err != nil {
		return 0, err
	}
	return out[0], nil
}
