package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39cSnapFigures sums a snapshot's blocks as the page's map caption does.
func s39cSnapFigures(segs []pageSegment) (managed, requested, activeN int64) {
	for _, s := range segs {
		managed += s.Size
		for _, b := range s.Blocks {
			if b.State == mempool.StateActive {
				requested += b.Requested
				activeN++
			}
		}
	}
	return
}

// A sanitized pool (guard bytes, a quarantine held
// as inactive splits or held blocks) with a History WithSites on two
// queues: its snapshot survives a JSON round trip, loads in viz, and the
// page `clpool viz` writes embeds the same map and figures: the managed
// and active bytes and blocks are Stats', the bands live at the end are
// the active blocks, the peaks are the pool's, and every block the
// history saw has its site.
func TestHostileS39cVizOfSanitizedPoolSnapshot(t *testing.T) {
	for _, arena := range []bool{false, true} {
		name := "bins"
		if arena {
			name = "arena"
		}
		t.Run(name, func(t *testing.T) {
			q := cltest.Queue(t)
			q2 := cltest.SecondQueue(t, q, 0)
			opts := []mempool.Option{mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)}
			if arena {
				opts = append(opts, mempool.WithArena())
			}
			pool := pooltest.New(t, q, opts...)
			old, err := pool.Allocate(7000)
			require.NoError(t, err)
			h := memhooks.NewHistory(1000, memhooks.WithSites())
			pool.AddHook(h)
			var keep []*mempool.PooledBuffer
			for i := range 30 {
				a := pool.Allocate
				if i%3 == 0 {
					a = pool.On(q2).Allocate
				}
				b, err := a(int64(1000 + 3000*i))
				require.NoError(t, err)
				if i%2 == 0 {
					require.NoError(t, b.Close())
				} else {
					keep = append(keep, b)
				}
			}
			snap := pool.Snapshot()
			st := pool.Stats()
			raw, err := json.Marshal(snap)
			require.NoError(t, err)
			var back mempool.Snapshot
			require.NoError(t, json.Unmarshal(raw, &back))
			assert.Equal(t, len(snap.Segments), len(back.Segments))

			snapPath := writeTemp(t, "snap.json", string(raw))
			pg, err := loadPage(snapPath, "arena", newProgress(&bytes.Buffer{}))
			require.NoError(t, err)
			// The page the command writes embeds the same figures.
			out := filepath.Join(t.TempDir(), "mem.html")
			var stderr bytes.Buffer
			require.NoError(t, vizCmd([]string{"-o", out, snapPath}, &stderr), stderr.String())
			html, err := os.ReadFile(out)
			require.NoError(t, err)
			m := regexp.MustCompile(`(?m)^const DATA = (.*);$`).FindSubmatch(html)
			require.NotNil(t, m, "the page embeds its data")
			var embedded page
			require.NoError(t, json.Unmarshal(m[1], &embedded))
			assert.Equal(t, pg.Map, embedded.Map, "the page's map is the snapshot's")
			assert.Equal(t, pg.Allocs, embedded.Allocs)
			assert.Equal(t, pg.PeakActive, embedded.PeakActive)
			assert.Equal(t, pg.PeakManaged, embedded.PeakManaged)
			managed, req, n := s39cSnapFigures(pg.Map.Segments)
			assert.Equal(t, st.ManagedBytes, managed)
			assert.Equal(t, st.ManagedBytes, pg.Map.ManagedBytes)
			assert.Equal(t, st.ActiveBytes, req)
			assert.Equal(t, st.ActiveBytes, pg.Map.ActiveBytes)
			assert.Equal(t, int64(st.ActiveBlocks), n)
			// the live allocations of the page at its end are the active blocks
			var live int64
			var liveN int64
			for i := range pg.Allocs.ID {
				if pg.Allocs.F[i] == 0 {
					live += pg.Allocs.Size[i]
					liveN++
				}
			}
			assert.Equal(t, st.ActiveBytes, live, "the bands live at the end are the active bytes")
			assert.Equal(t, int64(st.ActiveBlocks), liveN)
			assert.Equal(t, st.PeakActiveBytes, pg.PeakActive.Bytes)
			assert.Equal(t, st.PeakManagedBytes, pg.PeakManaged.Bytes)
			for _, s := range pg.Map.Segments {
				for _, b := range s.Blocks {
					if b.State == mempool.StateActive && b.ID != int64(old.ID()) {
						assert.NotEmpty(t, b.Site, "an active block's site is named (History WithSites)")
					}
				}
			}
			for _, b := range keep {
				require.NoError(t, b.Close())
			}
			require.NoError(t, old.Close())
			assert.Empty(t, pool.Findings())
		})
	}
}
