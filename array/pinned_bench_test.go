package array_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// BenchmarkPinnedGet4M compares ways of bringing a 4 MiB array (1 Mi
// float32) from the device to the host:
//
//   - Get: the ordinary download, into a new Go slice each time;
//   - ReadBuffer: the ordinary transfer into a Go slice that is reused;
//   - ReadToPinned: the transfer into a pinned pool block's host bytes,
//     which a program can use where it is (no further copy);
//   - GetInto: GetInto a PinnedSlice's Data (the same transfer through the
//     array API);
//   - GetPinned: through a pinned pool's staging block, then a copy into
//     a reused Go slice;
//   - GetPinnedPerTransfer: the same with a new pinned buffer each time
//     (allocated, mapped, unmapped and released), to show what the pool
//     saves.
func BenchmarkPinnedGet4M(b *testing.B) {
	const n = 1 << 20
	const size = 4 * n
	q := cltest.Queue(b)
	x, err := array.Full[float32](q, n, 1.5, array.Alloc(nil))
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	pinned, err := allocator.NewPinned(q)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := mempool.New(pinned)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	stage, err := array.NewStaging(pinned, pool.Allocate)
	if err != nil {
		b.Fatal(err)
	}
	perTransfer, err := array.NewStaging(pinned, pinned.Allocate)
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]float32, n)

	run := func(name string, get func() error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if err := get(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("Get", func() error {
		_, err := x.Get()
		return err
	})
	run("ReadBuffer", func() error {
		return q.ReadBuffer(x.Buffer(), 0, cl.Bytes(dst))
	})
	run("ReadToPinned", func() error {
		pb, err := pool.Allocate(size)
		if err != nil {
			return err
		}
		host := pinned.Host(pb.Base())[pb.Offset() : pb.Offset()+pb.Size()]
		if err := q.ReadBuffer(x.Buffer(), 0, host); err != nil {
			return err
		}
		return pb.Close()
	})
	ps, err := array.NewPinnedSlice[float32](stage, n)
	if err != nil {
		b.Fatal(err)
	}
	defer ps.Close()
	run("GetInto", func() error { return x.GetInto(ps.Data()) })
	run("GetPinned", func() error { return x.GetPinned(stage, dst) })
	run("GetPinnedPerTransfer", func() error { return x.GetPinned(perTransfer, dst) })
}
