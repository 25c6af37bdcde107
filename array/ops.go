package array

import "fmt"

// Element-wise operations. Each returns a new array from x's allocator, or
// updates its receiver in place (the I... methods). Operands must be open,
// of one context and of one length, and may be views (see Slice); an
// in-place update whose receiver overlaps an operand at another offset of
// the same memory is refused with ErrOverlap.

// Add returns x + y.
func Add[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("add", x, y) }

// Sub returns x - y.
func Sub[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("sub", x, y) }

// Mul returns x * y, element by element.
func Mul[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("mul", x, y) }

// Div returns x / y, element by element (integer division for integers;
// dividing by zero is undefined there, as in OpenCL C).
func Div[T Elem](x, y *Array[T]) (*Array[T], error) { return binary("div_", x, y) }

// IAdd sets x to x + y.
func (x *Array[T]) IAdd(y *Array[T]) error { return x.binaryInto(x, "add", y) }

// ISub sets x to x - y.
func (x *Array[T]) ISub(y *Array[T]) error { return x.binaryInto(x, "sub", y) }

// IMul sets x to x * y.
func (x *Array[T]) IMul(y *Array[T]) error { return x.binaryInto(x, "mul", y) }

// IDiv sets x to x / y.
func (x *Array[T]) IDiv(y *Array[T]) error { return x.binaryInto(x, "div_", y) }

func binary[T Elem](name string, x, y *Array[T]) (*Array[T], error) {
	if err := x.check(name, y); err != nil {
		return nil, err
	}
	return unary(x, func(z *Array[T]) error { return z.binaryInto(x, name, y) })
}

// binaryInto sets z to x op y.
func (z *Array[T]) binaryInto(x *Array[T], name string, y *Array[T]) error {
	if err := z.checkInto(name, x, y); err != nil || z.n == 0 {
		return err
	}
	return run[T](z.q, name, z.n, nil, z.buf(), z.offset(), x.buf(), x.offset(), y.buf(), y.offset(), int64(z.n))
}

// Scale returns a·x.
func Scale[T Elem](a T, x *Array[T]) (*Array[T], error) {
	return unary(x, func(z *Array[T]) error { return z.scaleInto(a, x) })
}

// IScale sets x to a·x.
func (x *Array[T]) IScale(a T) error { return x.scaleInto(a, x) }

func (z *Array[T]) scaleInto(a T, x *Array[T]) error {
	if err := z.checkInto("scale", x); err != nil || z.n == 0 {
		return err
	}
	return run[T](z.q, "scale", z.n, nil, z.buf(), z.offset(), a, x.buf(), x.offset(), int64(z.n))
}

// Axpy returns a·x + y.
func Axpy[T Elem](a T, x, y *Array[T]) (*Array[T], error) {
	if err := x.check("axpy", y); err != nil {
		return nil, err
	}
	return unary(x, func(z *Array[T]) error { return z.axpyInto(a, x, y) })
}

// IAxpy sets y to a·x + y.
func (y *Array[T]) IAxpy(a T, x *Array[T]) error { return y.axpyInto(a, x, y) }

func (z *Array[T]) axpyInto(a T, x, y *Array[T]) error {
	if err := z.checkInto("axpy", x, y); err != nil || z.n == 0 {
		return err
	}
	return run[T](z.q, "axpy", z.n, nil, z.buf(), z.offset(), a, x.buf(), x.offset(), y.buf(), y.offset(), int64(z.n))
}

// Tridiag returns the product of x with the tridiagonal matrix of constant
// diagonals: z[i] = lower·x[i-1] + diag·x[i] + upper·x[i+1], with the
// elements past the ends taken as zero. Tridiag(-1, 2, -1, x) applies the
// 1-D Poisson (Laplace) operator.
func Tridiag[T Elem](lower, diag, upper T, x *Array[T]) (*Array[T], error) {
	return unary(x, func(z *Array[T]) error {
		if err := z.checkInto("tridiag", x); err != nil || z.n == 0 {
			return err
		}
		return run[T](z.q, "tridiag", z.n, nil, z.buf(), z.offset(), lower, diag, upper, x.buf(), x.offset(), int64(z.n))
	})
}

// Fill sets every element to v.
func (x *Array[T]) Fill(v T) error {
	if err := x.check("fill"); err != nil || x.n == 0 {
		return err
	}
	return run[T](x.q, "fill", x.n, nil, x.buf(), x.offset(), v, int64(x.n))
}

// unary makes a result array like x and fills it with into.
func unary[T Elem](x *Array[T], into func(z *Array[T]) error) (*Array[T], error) {
	if err := x.check("op"); err != nil {
		return nil, err
	}
	z, err := newArray[T](x.q, x.n, x.alloc)
	if err != nil {
		return nil, err
	}
	if err := into(z); err != nil {
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
func Sum[T Elem](x *Array[T]) (T, error) { return reduce("rsum", "rsum", x, x) }

// Dot returns the sum of x[i]·y[i].
func Dot[T Elem](x, y *Array[T]) (T, error) {
	if err := x.check("dot", y); err != nil {
		return 0, err
	}
	return reduce("rdot", "rsum", x, y)
}

// Max returns the largest element; ErrEmpty for an empty array.
func Max[T Elem](x *Array[T]) (T, error) { return reduce("rmax", "rmax", x, x) }

// Min returns the smallest element; ErrEmpty for an empty array.
func Min[T Elem](x *Array[T]) (T, error) { return reduce("rmin", "rmin", x, x) }

func reduce[T Elem](first, second string, x, y *Array[T]) (T, error) {
	if err := x.check(first); err != nil {
		return 0, err
	}
	if x.n == 0 {
		if first == "rmax" || first == "rmin" {
			return 0, fmt.Errorf("array: %s: %w", first[1:], ErrEmpty) // "max", "min"
		}
		return 0, nil
	}
	groups := min(reduceGroups, (x.n+reduceGroup-1)/reduceGroup)
	partial, err := newArray[T](x.q, groups, x.alloc)
	if err != nil {
		return 0, err
	}
	defer partial.Close()
	result, err := newArray[T](x.q, 1, x.alloc)
	if err != nil {
		return 0, err
	}
	defer result.Close()
	local := []int{reduceGroup}
	scratch := localMem[T](reduceGroup)
	if err := run[T](x.q, first, groups*reduceGroup, local, partial.buf(), partial.offset(), x.buf(), x.offset(), y.buf(), y.offset(), int64(x.n), scratch); err != nil {
		return 0, err
	}
	if err := run[T](x.q, second, reduceGroup, local, result.buf(), result.offset(), partial.buf(), partial.offset(), partial.buf(), partial.offset(), int64(groups), scratch); err != nil {
		return 0, err
	}
	out, err := result.Get()
	if err != nil {
		return 0, err
	}
	return out[0], nil
}
