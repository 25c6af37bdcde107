package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// makeDryRun returns the commands `make -n target` would run in the
// repository's root, or skips the test where make is missing.
func makeDryRun(t *testing.T, target string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	cmd := exec.Command("make", "-n", target)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

// Issue 24: `make viz` rewrote the tracked docs/viz.png. It writes under
// build/ only; `make screenshots` regenerates the README's pictures.
func TestMakeVizWritesUnderBuildOnly(t *testing.T) {
	viz := makeDryRun(t, "viz")
	assert.NotContains(t, viz, "docs/")
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	// Every file it names to write: -o, --screenshot=, Chromium's profile
	// (in $HOME unless it is named), > redirections.
	assert.Contains(t, viz, "--user-data-dir=")
	written := regexp.MustCompile(`(?:-o |--screenshot=|--user-data-dir=|> )(\S+)`).FindAllStringSubmatch(viz, -1)
	require.NotEmpty(t, written)
	for _, m := range written {
		path := strings.TrimPrefix(m[1], root+"/")
		assert.True(t, strings.HasPrefix(path, "build/"), "make viz writes %s", m[1])
	}
	assert.Contains(t, viz, "--screenshot="+filepath.Join(root, "build", "viz.png"))

	shots := makeDryRun(t, "screenshots")
	assert.Contains(t, shots, "cp build/viz.png docs/viz.png")
}
