package array

import "github.com/clpool/clpool/cl"

// BuiltSets returns how many kernel sets the cache holds for ctx, and
// whether ctx's release is hooked.
func BuiltSets(ctx *cl.Context) (sets int, hooked bool) {
	built.mu.Lock()
	defer built.mu.Unlock()
	for key := range built.sets {
		if key.ctx == ctx {
			sets++
		}
	}
	return sets, built.hooked[ctx]
}
