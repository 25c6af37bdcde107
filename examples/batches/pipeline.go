package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"unsafe"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
)

// Float is the element types the pipeline runs in.
type Float interface{ float32 | float64 }

// config is a pipeline's workload.
type config struct {
	requests int     // requests in all
	maxBatch int     // a batch has 1 to maxBatch requests
	minLen   int     // the shortest request, in elements
	maxLen   int     // the longest: longer draws are cut to it
	alpha    float64 // the lengths' tail index: P(n > x) = (minLen/x)^alpha
	window   int     // the most results kept alive at once
	keep     float64 // the chance a result is kept in the window
	seed     uint64
}

// request is one request: its data (drawn at random, in [0.5, 1.5)) and
// the coefficient of its transform, z = a·x² + x.
type request struct {
	x []float64
	a float64
}

// source draws the requests: the same ones, in the same order, for a
// given config, whatever processes them.
type source struct {
	cfg config
	rng *rand.Rand
}

func newSource(cfg config) *source {
	return &source{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 0xba7c4))}
}

// length draws a request's length from the Pareto distribution of
// minimum minLen and tail index alpha, cut at maxLen.
func (s *source) length() int {
	u := 1 - s.rng.Float64() // in (0, 1]
	n := float64(s.cfg.minLen) * math.Pow(u, -1/s.cfg.alpha)
	if n >= float64(s.cfg.maxLen) {
		return s.cfg.maxLen
	}
	return int(n)
}

// batch draws the next batch: 1 to maxBatch requests, at most left.
func (s *source) batch(left int) []request {
	reqs := make([]request, min(left, 1+s.rng.IntN(s.cfg.maxBatch)))
	for i := range reqs {
		n := s.length()
		reqs[i] = request{x: make([]float64, n), a: 0.1 + s.rng.Float64()}
		for j := range n {
			reqs[i].x[j] = 0.5 + s.rng.Float64()
		}
	}
	return reqs
}

// answer is what the pipeline computes of a request: the sum and the
// largest element of z = a·x² + x, and the squared norm of w = z/max z.
type answer struct {
	sum, max, norm float64
}

// transform returns a·x² + x, one element of z, in float64.
func transform(a, x float64) float64 { return a*x*x + x }

// expect returns the answer to r, in float64 on the host, from r's data
// as T holds it.
func expect[T Float](r request) answer {
	ans := answer{max: math.Inf(-1)}
	for _, x := range r.x {
		z := transform(r.a, float64(T(x)))
		ans.sum += z
		ans.max = max(ans.max, z)
	}
	for _, x := range r.x {
		w := transform(r.a, float64(T(x))) / ans.max
		ans.norm += w * w
	}
	return ans
}

// kept is a result the window holds: w on the device, with its request
// and answer for the host's check.
type kept[T Float] struct {
	w   *array.Array[T]
	req request
	ans answer
}

// result is what a run reports.
type result struct {
	Requests, Batches int
	Elements          int64 // over all requests
	Lengths           []int // each request's, in order
	Overlaps          int   // window overlaps computed
	PeakWindowBytes   int64 // the most bytes the window held at once
	MaxRelErr         float64
	Checksum          float64 // the sum of every request's sum, from the device
	Answers           []answer
}

// relErr returns |got - want| relative to |want| (absolute below 1).
func relErr(got, want float64) float64 {
	return math.Abs(got-want) / math.Max(1, math.Abs(want))
}

// process runs the pipeline in T with arrays from allocate. Each request
// is uploaded, transformed (z = a·x² + x: Mul, Axpy), reduced (Sum,
// Max), normalized (w = z / max z: Scale) and reduced again (Dot); w is
// kept, with chance cfg.keep, in a window of the last cfg.window kept
// results, each batch's sums are gathered into one array and reduced, and
// after each batch the newest and oldest results of the window are
// compared over their common length (Dot of views). Every figure is
// checked against the host's float64; the largest relative error is
// reported.
func process[T Float, B array.Block](q *cl.CommandQueue, cfg config, allocate func(int64) (B, error)) (res result, err error) {
	// !(alpha > 0): NaN is refused too.
	if cfg.requests < 0 || cfg.maxBatch < 1 || cfg.minLen < 1 || cfg.maxLen < cfg.minLen || !(cfg.alpha > 0) || math.IsInf(cfg.alpha, 1) || cfg.window < 1 {
		return res, fmt.Errorf("batches: bad config %+v", cfg)
	}
	src := newSource(cfg)
	var window []kept[T]
	var windowBytes int64
	defer func() {
		for _, k := range window {
			k.w.Close()
		}
	}()
	check := func(got, want float64) {
		res.MaxRelErr = max(res.MaxRelErr, relErr(got, want))
	}
	for res.Requests < cfg.requests {
		reqs := src.batch(cfg.requests - res.Requests)
		res.Batches++
		sums := make([]T, len(reqs))
		var want float64
		for i, r := range reqs {
			got, w, err := one[T](q, r, allocate)
			if err != nil {
				return res, fmt.Errorf("request %d (%d elements): %w", res.Requests, len(r.x), err)
			}
			ans := expect[T](r)
			check(got.sum, ans.sum)
			check(got.max, ans.max)
			check(got.norm, ans.norm)
			res.Requests++
			res.Elements += int64(len(r.x))
			res.Lengths = append(res.Lengths, len(r.x))
			res.Answers = append(res.Answers, got)
			res.Checksum += got.sum
			sums[i] = T(got.sum)
			want += float64(sums[i])
			if src.rng.Float64() >= cfg.keep {
				w.Close()
				continue
			}
			if len(window) == cfg.window {
				windowBytes -= int64(window[0].w.Len()) * int64(elemSize[T]())
				window[0].w.Close()
				window = window[1:]
			}
			window = append(window, kept[T]{w, r, ans})
			windowBytes += int64(w.Len()) * int64(elemSize[T]())
			res.PeakWindowBytes = max(res.PeakWindowBytes, windowBytes)
		}
		total, err := gather(q, sums, allocate)
		if err != nil {
			return res, fmt.Errorf("batch %d: %w", res.Batches, err)
		}
		check(total, want)
		if len(window) >= 2 {
			got, err := overlap(window[0].w, window[len(window)-1].w)
			if err != nil {
				return res, fmt.Errorf("batch %d: %w", res.Batches, err)
			}
			check(got, hostOverlap[T](window[0], window[len(window)-1]))
			res.Overlaps++
		}
	}
	return res, nil
}

func elemSize[T Float]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// one runs request r through the pipeline and returns its answer and w,
// which the caller closes.
func one[T Float, B array.Block](q *cl.CommandQueue, r request, allocate func(int64) (B, error)) (ans answer, w *array.Array[T], err error) {
	data := make([]T, len(r.x))
	for i, x := range r.x {
		data[i] = T(x)
	}
	x, err := array.FromHost(q, data, allocate)
	if err != nil {
		return ans, nil, err
	}
	defer x.Close()
	y, err := array.Mul(x, x)
	if err != nil {
		return ans, nil, err
	}
	z, err := array.Axpy(T(r.a), y, x) // a·x² + x
	y.Close()
	if err != nil {
		return ans, nil, err
	}
	defer z.Close()
	sum, err1 := array.Sum(z)
	mx, err2 := array.Max(z)
	if err := errors.Join(err1, err2); err != nil {
		return ans, nil, err
	}
	if w, err = array.Scale(1/mx, z); err != nil {
		return ans, nil, err
	}
	norm, err := array.Dot(w, w)
	if err != nil {
		w.Close()
		return ans, nil, err
	}
	return answer{sum: float64(sum), max: float64(mx), norm: float64(norm)}, w, nil
}

// gather uploads a batch's sums into one array and returns their sum,
// reduced on the device.
func gather[T Float, B array.Block](q *cl.CommandQueue, sums []T, allocate func(int64) (B, error)) (float64, error) {
	s, err := array.FromHost(q, sums, allocate)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	total, err := array.Sum(s)
	return float64(total), err
}

// overlap returns the dot product of a and b over the elements both have:
// views of their first min(len a, len b) elements.
func overlap[T Float](a, b *array.Array[T]) (float64, error) {
	n := min(a.Len(), b.Len())
	av, err := a.Slice(0, n)
	if err != nil {
		return 0, err
	}
	defer av.Close()
	bv, err := b.Slice(0, n)
	if err != nil {
		return 0, err
	}
	defer bv.Close()
	d, err := array.Dot(av, bv)
	return float64(d), err
}

// hostOverlap is overlap on the host, in float64.
func hostOverlap[T Float](a, b kept[T]) float64 {
	var d float64
	for i := range min(len(a.req.x), len(b.req.x)) {
		wa := transform(a.req.a, float64(T(a.req.x[i]))) / a.ans.max
		wb := transform(b.req.a, float64(T(b.req.x[i]))) / b.ans.max
		d += wa * wb
	}
	return d
}
