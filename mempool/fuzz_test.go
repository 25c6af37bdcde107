package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// poolModel is the pool's counting semantics written as plainly as
// possible, to check the real pool against.
type poolModel struct {
	lb      int
	holding bool
	held    map[uint32][]*cl.Buffer // LIFO stacks
	c       counters
	hits    int64
	misses  int64
	allocs  int64
	frees   int64
}

func (m *poolModel) alloc(size int64) (reuse *cl.Buffer) {
	bin := mempool.BinNumber(size, m.lb)
	n := mempool.AllocSize(bin, m.lb)
	m.c.Active++
	m.c.ActiveBytes += size
	if st := m.held[bin]; len(st) > 0 {
		reuse = st[len(st)-1]
		m.held[bin] = st[:len(st)-1]
		m.hits++
		m.c.Held--
		m.c.HeldBytes -= n
		return reuse
	}
	m.misses++
	m.allocs++
	m.c.Managed += n
	return nil
}

func (m *poolModel) close(b *mempool.PooledBuffer, buf *cl.Buffer) {
	bin := mempool.BinNumber(b.Size(), m.lb)
	n := mempool.AllocSize(bin, m.lb)
	m.c.Active--
	m.c.ActiveBytes -= b.Size()
	if m.holding {
		m.held[bin] = append(m.held[bin], buf)
		m.c.Held++
		m.c.HeldBytes += n
		return
	}
	m.c.Managed -= n
	m.frees++
}

func (m *poolModel) freeHeld() {
	m.frees += int64(m.c.Held)
	m.c.Managed -= m.c.HeldBytes
	m.c.Held, m.c.HeldBytes = 0, 0
	clear(m.held)
}

var fuzzSizes = []int64{0, 1, 2, 3, 7, 8, 63, 64, 100, 101, 4096, 4100, 4200, 65536}

// FuzzPool runs a sequence of operations, two bytes each, on a real pool
// and on the model, and compares them after every step.
func FuzzPool(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 3, 0, 0, 1, 3, 0, 5, 0})
	f.Add([]byte{0, 9, 1, 10, 2, 11, 3, 0, 3, 1, 4, 0, 0, 9, 5, 1, 0, 9, 3, 0, 3, 0})
	f.Add([]byte{0, 13, 3, 0, 0, 13, 0, 12, 3, 1, 3, 0, 5, 2, 5, 0})
	q := cltest.Queue(f)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, ops []byte) {
		count := allocator.NewCounting(d)
		lb := 2 + len(ops)%3
		dropSafety := len(ops)/3%2 == 0
		p, err := mempool.New(count, mempool.WithLeadingBits(lb), mempool.WithDropSafety(dropSafety))
		require.NoError(t, err)
		m := &poolModel{lb: lb, holding: true, held: map[uint32][]*cl.Buffer{}}
		type live struct {
			b   *mempool.PooledBuffer
			buf *cl.Buffer
		}
		var open, closed []live
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%6, int(ops[i+1])
			switch op {
			case 0, 1, 2:
				size := fuzzSizes[arg%len(fuzzSizes)]
				want := m.alloc(size)
				b, err := p.Allocate(size)
				require.NoError(t, err)
				if want != nil {
					require.Same(t, want, b.Buffer(), "a hit takes the most recently freed block")
				}
				require.GreaterOrEqual(t, b.Buffer().Size(), max(size, 1))
				open = append(open, live{b, b.Buffer()})
			case 3:
				if len(open) == 0 {
					continue
				}
				k := arg % len(open)
				l := open[k]
				open = append(open[:k], open[k+1:]...)
				m.close(l.b, l.buf)
				require.NoError(t, l.b.Close())
				closed = append(closed, l)
			case 4:
				if len(closed) == 0 {
					continue
				}
				require.ErrorIs(t, closed[arg%len(closed)].b.Close(), mempool.ErrClosed)
			case 5:
				switch arg % 4 {
				case 0:
					m.freeHeld()
					p.FreeHeld()
				case 1:
					m.holding = false
					m.freeHeld()
					p.StopHolding()
				case 2:
					_, err := p.Allocate(-int64(arg) - 1)
					require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
				}
			}
			s := p.Stats()
			require.Equal(t, m.c, countersOf(s), "after op %d (%d %d)", i/2, op, arg)
			require.Equal(t, [4]int64{m.hits, m.misses, m.allocs, m.frees}, [4]int64{s.Hits, s.Misses, s.DeviceAllocs, s.DeviceFrees})
		}
		for _, l := range open {
			require.NoError(t, l.b.Close())
		}
		p.StopHolding()
		cs := count.Stats()
		require.Zero(t, cs.Live)
		require.Zero(t, cs.BadFrees)
		require.Equal(t, cs.Allocs, cs.Frees)
	})
}
