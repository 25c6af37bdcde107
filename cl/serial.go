package cl

import "sync"

// serialMu serializes the calls on objects of runtimes that are not safe
// for concurrent use, although OpenCL 1.2 requires it of every call but
// clSetKernelArg; it protects no fields. Oclgrind 21.10 is one such
// runtime: two goroutines creating and releasing buffers at once corrupt
// its heap ("double free or corruption"). On other runtimes the objects'
// serial flag is false and nothing is locked.
var serialMu sync.Mutex

// threadUnsafePlatforms names, in lower case, the platforms whose calls are
// serialized.
var threadUnsafePlatforms = []string{"oclgrind"}

// needsSerial reports whether any of the devices is on such a platform.
func needsSerial(devices []*Device) bool {
	for _, d := range devices {
		if d.onPlatform(threadUnsafePlatforms) {
			return true
		}
	}
	return false
}

// Serialized reports whether calls on the context's objects are serialized
// because its runtime is not safe for concurrent use (Oclgrind); false for a
// nil Context.
func (c *Context) Serialized() bool { return c != nil && c.serial }
