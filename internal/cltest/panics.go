package cltest

import "fmt"

// NoPanic runs fn and returns its error, or an error saying "panicked: "
// and the value if fn panicked: a test of a program's bad input asserts a
// clear error, not a crash.
func NoPanic(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return fn()
}
