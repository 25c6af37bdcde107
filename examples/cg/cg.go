package main

import (
	"math"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
)

// Float is the element types the solver runs in.
type Float interface{ float32 | float64 }

// solution is what a solve returns.
type solution[T Float] struct {
	X        []T     // the approximate solution
	Residual float64 // ||b - Ax|| / ||b|| as CG tracks it (the recurrence's r)
}

// solve runs iters iterations of the conjugate-gradient method on the 1-D
// Poisson system A x = b, where A is tridiagonal (2 on the diagonal, -1 on
// either side) and b is all ones, starting from x = 0. Every vector and
// temporary comes from alloc, as in pyopencl.array code written the plain
// way: each step makes new arrays and closes the old ones.
func solve[T Float, B array.Block](q *cl.CommandQueue, n, iters int, alloc func(int64) (B, error)) (solution[T], error) {
	var none solution[T]
	b, err := array.Full[T](q, n, 1, alloc)
	if err != nil {
		return none, err
	}
	defer func() { b.Close() }()
	x, err := array.Zeros[T](q, n, alloc)
	if err != nil {
		return none, err
	}
	defer func() { x.Close() }()
	r, err := b.Copy() // r = b - A·0
	if err != nil {
		return none, err
	}
	defer func() { r.Close() }()
	p, err := r.Copy()
	if err != nil {
		return none, err
	}
	defer func() { p.Close() }()
	rr, err := array.Dot(r, r)
	if err != nil {
		return none, err
	}
	bb := rr

	// replace closes *old and puts next in its place.
	replace := func(old **array.Array[T], next *array.Array[T]) { (*old).Close(); *old = next }
	for range iters {
		if rr == 0 {
			break // solved exactly
		}
		ap, err := array.Tridiag[T](-1, 2, -1, p)
		if err != nil {
			return none, err
		}
		pap, err := array.Dot(p, ap)
		if err != nil {
			ap.Close()
			return none, err
		}
		alpha := rr / pap
		xn, err := array.Axpy(alpha, p, x) // x + α p
		if err != nil {
			ap.Close()
			return none, err
		}
		replace(&x, xn)
		rn, err := array.Axpy(-alpha, ap, r) // r - α A p
		ap.Close()
		if err != nil {
			return none, err
		}
		replace(&r, rn)
		rrNew, err := array.Dot(r, r)
		if err != nil {
			return none, err
		}
		pn, err := array.Axpy(rrNew/rr, p, r) // r + β p
		if err != nil {
			return none, err
		}
		replace(&p, pn)
		rr = rrNew
	}
	xs, err := x.Get()
	if err != nil {
		return none, err
	}
	return solution[T]{X: xs, Residual: math.Sqrt(float64(rr) / float64(bb))}, nil
}
