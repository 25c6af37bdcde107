package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

// BenchmarkReplay replays recorded and synthetic traces (many sizes,
// radix sorts, small pools) through a warm pool
// over Immediate, with exact bins and with the arena, with drop safety and
// without (-nodrop): what `clpool replay` times, in a form `-cpuprofile`
// can look into (ns/event).
func BenchmarkReplay(b *testing.B) {
	for _, name := range []string{"cg", "mlp", "particles", "synth-random-mixed", "synth-radix-grow", "synth-small-1.5mb", "synth-small-0.5mb", "synth-radix-two"} {
		events, err := trace.ReadFile("../testdata/" + name + ".tsv")
		if err != nil {
			b.Fatal(err)
		}
		events = trace.Blocks(events)
		for _, policy := range []struct {
			name string
			opts []mempool.Option
		}{
			{"bins", nil},
			{"arena", []mempool.Option{mempool.WithArena()}},
			{"bins-nodrop", []mempool.Option{mempool.WithDropSafety(false)}},
			{"arena-nodrop", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
		} {
			b.Run(name+"/"+policy.name, func(b *testing.B) {
				p := benchPool(b, policy.opts...)
				replay := func() {
					if err := trace.Replay(events, p.Allocate, (*mempool.PooledBuffer).Close); err != nil {
						b.Fatal(err)
					}
				}
				replay() // warm: the segments and bins a replay needs
				for b.Loop() {
					replay()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
			})
		}
	}
}
