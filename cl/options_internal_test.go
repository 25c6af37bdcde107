package cl

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSpacedOptions: BuildProgram hands the runtime its options with ASCII
// whitespace as spaces (NVIDIA's compiler fails on "-D\nX"); other
// bytes, quotes, non-ASCII spaces and bytes that are not UTF-8 (a Latin-1
// directory name) included, pass as they are (s35a: strings.Map made
// U+FFFD of the latter).
func TestSpacedOptions(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"-D\nX":                  "-D X",
		"-w -D X\n":              "-w -D X ",
		"-D\tA=1\r\n-D\vB\f":     "-D A=1  -D B ",
		`-I "a dir" -DX=é`:       `-I "a dir" -DX=é`,
		"-DX=\u00a0":             "-DX=\u00a0",
		"-I /tmp/caf\xe9":        "-I /tmp/caf\xe9",
		"-DX=\xff\n-DY":          "-DX=\xff -DY",
		"-D\tA=\x85\r\n-DB=\x80": "-D A=\x85  -DB=\x80",
	} {
		assert.Equal(t, want, spaced(in), "%q", in)
	}
}
