package cl

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// FAILS: spaced (program.go:107) uses strings.Map, which rewrites every byte
// that is not valid UTF-8 as U+FFFD ("\xef\xbf\xbd"), so BuildProgram hands
// the runtime other bytes than the caller's, not only ASCII whitespace
// turned into spaces as its doc says ("Tabs, newlines and the other ASCII
// whitespace of the options reach the runtime as spaces") and
// TestSpacedOptions' comment ("other characters ... pass as they are").
// An include directory whose name is Latin-1 is no longer found: see
// TestHostileS35aNonUTF8IncludeDir. Passes once spaced maps bytes, not runes.
func TestHostileS35aSpacedKeepsNonUTF8Bytes(t *testing.T) {
	for in, want := range map[string]string{
		"-I /tmp/caf\xe9":        "-I /tmp/caf\xe9",
		"-DX=\xff\n-DY":          "-DX=\xff -DY",
		"-I \xc3":                "-I \xc3",
		"-D\tA=\x85\r\n-DB=\x80": "-D A=\x85  -DB=\x80",
	} {
		assert.Equal(t, want, spaced(in), "%q", in)
	}
}
