package cl_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
)

// BenchmarkCreateReleaseBuffer is the price of one device allocation and
// free through the binding: what a pool hit saves.
func BenchmarkCreateReleaseBuffer(b *testing.B) {
	q := cltest.Queue(b)
	ctx := q.Context()
	b.ReportAllocs()
	for b.Loop() {
		buf, err := ctx.CreateBuffer(cl.MemReadWrite, 4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := buf.Release(); err != nil {
			b.Fatal(err)
		}
	}
}
