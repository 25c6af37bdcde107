package main

// Hostile review s39b: `clpool viz` on inputs the usage text and
// loadPage's doc say it reads.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fixed this session (it failed before). loadPage's doc: "A file whose first character other than white
// space is '{' is a snapshot; any other, a trace"; the usage: FILE is "a
// trace ... or a pool snapshot (the JSON of mempool.Pool.Snapshot)".
// loadPage looks for the '{' in the first 512 bytes only (viz.go,
// loadPage: br.Peek(512), then bytes.TrimLeft of those): a snapshot with
// more than 512 bytes of white space before it (JSON allows any; a
// pretty-printer or a shell that pads it, a snapshot written after blank
// lines) is read as a trace, and refused as one: with 600 newlines,
// "snap.json:601: want `op id size` or `op id size t`, got 1 fields:
// "{\"policy\"..."". The same JSON after 500 newlines is drawn.
// Expected: drawn as the snapshot it is.
func TestHostileS39bVizSnapshotAfterMuchWhiteSpace(t *testing.T) {
	snap := `{"policy":"arena","managed_bytes":4096,"active_bytes":0,"segments":[{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"held"}]}]}`
	for _, pad := range []int{500, 600, 4096} {
		path := writeTemp(t, "snap.json", strings.Repeat("\n", pad)+snap+"\n")
		pg, err := loadPage(path, "arena", newProgress(&bytes.Buffer{}))
		if !assert.NoError(t, err, "%d newlines before the snapshot", pad) {
			continue
		}
		require.Equal(t, "snapshot", pg.Source)
		assert.Equal(t, int64(4096), pg.Map.ManagedBytes)
	}
}
