// callback.c holds the C side of Event.OnComplete: the function the
// runtime calls, which hands the status and the Go handle to Go.
#include "clpool.h"
#include "_cgo_export.h"

static void CL_CALLBACK clpool_event_cb(cl_event e, cl_int status, void *user) {
	(void)e;
	clpoolEventDone(status, (uintptr_t)user);
}

cl_int clpool_set_callback(cl_event e, uintptr_t h) {
	return clSetEventCallback(e, CL_COMPLETE, clpool_event_cb, (void *)h);
}
