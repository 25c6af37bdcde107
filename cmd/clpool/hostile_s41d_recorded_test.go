package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileS41dReplayAndVizOfRecordedTraces records traces of a pool
// used by goroutines on three queues: a TraceRecorder added after the
// pool had blocks and segments (their frees left out), with sites, and
// the WriteTrace of a History whose ring wrapped many times (ids not
// from 1, times not from 0, segments whose allocation left the ring
// written first). The recorder's doc says such a trace can be "replayed
// (`clpool replay`) or drawn (`clpool viz`)", the History's that what
// WriteTrace writes "reads back with trace.Read (and ReadComplete) and
// replays". Both must.
func TestHostileS41dReplayAndVizOfRecordedTraces(t *testing.T) {
	cltest.Watchdog(t, 200*time.Second)
	for _, arena := range []bool{false, true} {
		t.Run(map[bool]string{false: "bins", true: "arena"}[arena], func(t *testing.T) {
			q := cltest.Queue(t)
			qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
			var opts []mempool.Option
			if arena {
				opts = append(opts, mempool.WithArena())
			}
			p := pooltest.New(t, q, opts...)
			var early []*mempool.PooledBuffer
			for _, n := range []int64{100, 5000, 1 << 20, 3 << 20} {
				b, err := p.Allocate(n)
				require.NoError(t, err)
				early = append(early, b)
			}
			var recBuf bytes.Buffer
			rec := memhooks.NewTraceRecorder(&recBuf, memhooks.WithSites(), memhooks.WithFlushEvery(0))
			h := memhooks.NewHistory(37)
			p.AddHook(rec)
			p.AddHook(h)
			var wg sync.WaitGroup
			for g := range 3 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					a := p.On(qs[g])
					var mine []*mempool.PooledBuffer
					for range cltest.Size(q, 80, 200) {
						if rng.IntN(2) == 0 || len(mine) == 0 {
							b, err := a.Allocate(int64(1 + rng.IntN(3<<20)))
							if assert.NoError(t, err) {
								mine = append(mine, b)
							}
						} else {
							j := rng.IntN(len(mine))
							assert.NoError(t, mine[j].Close())
							mine = append(mine[:j], mine[j+1:]...)
						}
					}
					for _, b := range mine {
						assert.NoError(t, b.Close())
					}
				})
			}
			wg.Wait()
			var hb bytes.Buffer
			require.NoError(t, h.WriteTrace(&hb)) // before FreeHeld's segment frees fill the ring
			for _, b := range early {
				require.NoError(t, b.Close())
			}
			require.NoError(t, p.FreeHeld())
			require.NoError(t, rec.Close())
			dir := t.TempDir()
			for name, data := range map[string][]byte{"rec.tsv": recBuf.Bytes(), "hist.tsv": hb.Bytes()} {
				t.Run(name, func(t *testing.T) {
					_, err := trace.ReadComplete(bytes.NewReader(data))
					require.NoError(t, err)
					path := filepath.Join(dir, name)
					require.NoError(t, os.WriteFile(path, data, 0o644))
					var out, errb bytes.Buffer
					code := run([]string{"replay", "-runs", "1", "-warmup", "0", "-configs", "pool-immediate,pool-arena", path}, &out, &errb)
					assert.Zero(t, code, "replay: %s%s", out.String(), errb.String())
					for _, pol := range []string{"arena", "bins"} {
						errb.Reset()
						html := filepath.Join(dir, name+"."+pol+".html")
						code = run([]string{"viz", "-policy", pol, "-o", html, path}, &out, &errb)
						assert.Zero(t, code, "viz: %s", errb.String())
					}
				})
			}
		})
	}
}

// TestHostileS41dVizOfSnapshotWithWrappedHistory: a snapshot whose
// History ring (of 1 to 9 entries) wrapped, its first events frees of
// blocks and segments whose allocations left the ring (Events' doc), on
// two queues. `clpool viz` reads a snapshot's history "checked as a
// trace is"; what the History kept must draw.
func TestHostileS41dVizOfSnapshotWithWrappedHistory(t *testing.T) {
	for _, n := range []int{1, 2, 5, 9} {
		for _, arena := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/arena=%v", n, arena), func(t *testing.T) {
				q := cltest.Queue(t)
				q2 := cltest.SecondQueue(t, q, 0)
				var opts []mempool.Option
				if arena {
					opts = append(opts, mempool.WithArena())
				}
				p := pooltest.New(t, q, opts...)
				h := memhooks.NewHistory(n, memhooks.WithSites())
				p.AddHook(h)
				rng := rand.New(rand.NewPCG(uint64(n), 5))
				var open []*mempool.PooledBuffer
				dir := t.TempDir()
				for step := range 40 {
					switch op := rng.IntN(8); {
					case op < 4:
						b, err := p.On([]*cl.CommandQueue{q, q2}[rng.IntN(2)]).Allocate(int64(1 + rng.IntN(3<<20)))
						require.NoError(t, err)
						open = append(open, b)
					case op < 7:
						if len(open) > 0 {
							i := rng.IntN(len(open))
							require.NoError(t, open[i].Close())
							open = append(open[:i], open[i+1:]...)
						}
					default:
						require.NoError(t, p.FreeHeld())
					}
					if step%8 != 7 {
						continue
					}
					data, err := json.Marshal(p.Snapshot())
					require.NoError(t, err)
					path := filepath.Join(dir, fmt.Sprintf("snap%d.json", step))
					require.NoError(t, os.WriteFile(path, data, 0o644))
					var out, errb bytes.Buffer
					code := run([]string{"viz", "-o", path + ".html", path}, &out, &errb)
					assert.Zero(t, code, "step %d: viz: %s\n%s", step, errb.String(), data)
				}
				for _, b := range open {
					require.NoError(t, b.Close())
				}
			})
		}
	}
}
