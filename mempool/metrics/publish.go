package metrics

import (
	"expvar"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/clpool/clpool/mempool"
)

// publishMu serializes Publish (it protects no fields), so that its check
// of a name and its publication are one step: two Publish calls of one
// name cannot both pass the check.
var publishMu sync.Mutex

// Publish publishes p's MemoryStats (torch.cuda.memory_stats' keys and
// values) as the expvar variable name, an expvar.Func read at each
// request: expvar.Handler, and the /debug/vars that importing expvar adds
// to http.DefaultServeMux, show it as a JSON object.
//
// expvar panics on a name published twice; Publish returns an error
// matching ErrNameTaken instead, and an error for a nil p or a name that
// is not valid UTF-8 (/debug/vars would show it as another name, with
// U+FFFD, which a second pool may have); it publishes nothing then. expvar
// cannot remove a variable: a published pool stays published for the life
// of the program, and a closed one keeps showing its last figures.
func Publish(name string, p *mempool.Pool) error {
	if p == nil {
		return fmt.Errorf("metrics: Publish(%q): nil pool", name)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("metrics: Publish(%q): the name is not valid UTF-8", name)
	}
	publishMu.Lock()
	defer publishMu.Unlock()
	if expvar.Get(name) != nil {
		return fmt.Errorf("%w: expvar has a variable %q already", ErrNameTaken, name)
	}
	expvar.Publish(name, expvar.Func(func() any { return p.MemoryStats() }))
	return nil
}
