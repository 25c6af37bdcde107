package array

import "github.com/clpool/clpool/cl"

// localMem is the __local scratch argument of n elements of T.
func localMem[T Elem](n int) cl.LocalMem { return cl.LocalMem(int64(n) * elemSize[T]()) }
