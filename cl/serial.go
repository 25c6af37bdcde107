package cl

import "sync"

// serialMu serializes the calls on objects of runtimes that are not safe
// for concurrent use, although OpenCL 1.2 requires it of every call but
// clSetKernelArg; it protects no fields. Oclgrind 21.10 is one such
// runtime: two goroutines creating and releasing buffers at once corrupt
// its heap ("double free or corruption"). On other runtimes the objects'
// serial flag is false and serialMu is not taken (NVIDIA's takes orderMu
// for a few calls).
var serialMu sync.Mutex

// threadUnsafePlatforms names, in lower case, the platforms whose calls are
// serialized.
var threadUnsafePlatforms = []string{"oclgrind"}

// orderMu serializes, on runtimes listed in orderUnsafePlatforms, the
// calls that order queues: clFlush, the markers and barriers of
// EnqueueMarker and EnqueueBarrier, and the migrations of EnqueueMigrate
// (which were under it too in the runs that showed it enough). NVIDIA's
// driver (580, on an H100 and an H200) crashes in a thread of its own when
// goroutines flush some queues while others enqueue markers and barriers
// that wait on them: mempool's queue ordering did it in 6 runs of 6 of a
// test, still did with either kind of call serialized alone, and did not
// with both (README, "Runtimes"). These calls do not block, so the lock
// costs little; calls that block and flush as they do (Finish, blocking
// reads and writes, waits) take no lock, which the runs did not show
// unsafe. It protects no fields.
var orderMu sync.Mutex

// orderUnsafePlatforms names, in lower case, the platforms whose calls
// that order queues take orderMu.
var orderUnsafePlatforms = []string{"nvidia"}

// orderLock returns the mutex a call that orders c's queues takes (serialMu
// on a runtime whose every call is serialized), or nil if none.
func (c *Context) orderLock() *sync.Mutex {
	switch {
	case c.serial:
		return &serialMu
	case c.orderSerial:
		return &orderMu
	}
	return nil
}

// needsOrderSerial reports whether the devices (of one platform) are on a
// platform whose calls that order queues take orderMu (orderLock prefers
// serialMu where a context needs that).
func needsOrderSerial(devices []*Device) bool {
	return len(devices) > 0 && devices[0].onPlatform(orderUnsafePlatforms)
}

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
