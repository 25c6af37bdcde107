package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplayPrintsEveryConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.tsv")
	require.NoError(t, os.WriteFile(path, []byte("op\tid\tsize\na\t1\t4096\na\t2\t100\nf\t1\t0\na\t3\t4000\nf\t2\t0\nf\t3\t0\n"), 0o644))
	var out, errs bytes.Buffer
	err := replayCmd([]string{"-runs", "2", "-format", "tsv", path}, &out, &errs)
	require.NoError(t, err, errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 7)
	assert.Equal(t, "config\tns_per_event\thits\tmisses\tdevice_allocs\tpeak_managed\tpeak_live", lines[0])
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		require.Len(t, f, 7, l)
		assert.Equal(t, "4196", f[6], "peak live: 4096 + 100")
	}
	// In its first run the pool misses all three: 4000 and 4096 are in
	// different bins, so the freed 4096-byte block does not serve 4000.
	arena := strings.Split(lines[6], "\t")
	assert.Equal(t, []string{"pool-arena", "2", "1", "1", "2097152"}, []string{arena[0], arena[2], arena[3], arena[4], arena[5]},
		"the arena cuts all three from one 2 MiB segment")
	f := strings.Split(lines[4], "\t")
	assert.Equal(t, []string{"pool-immediate", "0", "3", "3"}, []string{f[0], f[2], f[3], f[4]})
	assert.Contains(t, errs.String(), "run 3/3", "plain progress lines when not on a terminal")
}

func TestReplayRefusesBadInput(t *testing.T) {
	var out, errs bytes.Buffer
	assert.Error(t, replayCmd([]string{}, &out, &errs))
	assert.Error(t, replayCmd([]string{"no-such-file.tsv"}, &out, &errs))
	path := filepath.Join(t.TempDir(), "t.tsv")
	require.NoError(t, os.WriteFile(path, []byte("a\t1\t8\nf\t1\t0\n"), 0o644))
	assert.ErrorContains(t, replayCmd([]string{"-configs", "nonsense", path}, &out, &errs), "unknown configuration")
	assert.ErrorContains(t, replayCmd([]string{"-configs", "deferred-nodrop", path}, &out, &errs), "unknown configuration")
	assert.Error(t, replayCmd([]string{"-runs", "0", path}, &out, &errs))
}
