// Package nilptr tells a nil value in an interface from a real one: the
// check allocator, mempool and array make before they call an allocator
// or a block they were given.
package nilptr

import "reflect"

// Is reports whether v is nil, or a nil pointer in the interface (a
// typed nil, such as a nil *allocator.Deferred), whose methods would
// panic.
func Is(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
