package cl_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// overlap (transfer.go), added for ErrMemCopyOverlap, says "Ranges past a
// buffer's end are left to the runtime (ErrInvalidValue)", and the package
// doc promises every runtime the same Status. POCL does not check a
// sub-buffer's bounds: a copy of 16 bytes from offset Size-8 of a
// sub-buffer succeeds and reads 8 bytes of the parent past the sub-buffer
// (in a pool: the next block's data), and the same range copied to the
// neighbouring sub-buffer gets CL_MEM_COPY_OVERLAP, where Oclgrind answers
// CL_INVALID_VALUE for both (OpenCL 1.2: CL_INVALID_VALUE if src_offset +
// size "require accessing elements outside" src_buffer). Expected:
// ErrInvalidValue for both, on every runtime. Observed on POCL: nil (and
// the neighbour's bytes copied), then ErrMemCopyOverlap.
func TestHostileS30bCopyPastSubBufferEndPOCL(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := s30Queue(t, "pocl")
	ctx := q.Context()
	al := ctx.MemBaseAddrAlign()
	require.Positive(t, al)
	parent, err := ctx.CreateBuffer(cl.MemReadWrite, 2*al)
	require.NoError(t, err)
	defer parent.Release()
	data := make([]byte, 2*al)
	for i := range data {
		data[i] = byte(1 + i%200)
	}
	_, err = q.EnqueueWriteBuffer(parent, true, 0, data)
	require.NoError(t, err)
	s1, err := parent.CreateSubBuffer(0, 0, al) // parent [0, al)
	require.NoError(t, err)
	defer s1.Release()
	s2, err := parent.CreateSubBuffer(0, al, al) // parent [al, 2al)
	require.NoError(t, err)
	defer s2.Release()
	other, err := ctx.CreateBuffer(cl.MemReadWrite, al)
	require.NoError(t, err)
	defer other.Release()

	ev, err := q.EnqueueCopyBuffer(s1, other, al-8, 0, 16) // 8 bytes past s1's end
	if ev != nil {
		_ = ev.Wait()
		_ = ev.Release()
	}
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "16 bytes from offset %d of a %d-byte sub-buffer", al-8, al)
	if err == nil {
		got := make([]byte, 16)
		_, rerr := q.EnqueueReadBuffer(other, true, 0, got)
		require.NoError(t, rerr)
		t.Logf("copied %v; the parent's bytes past s1 are %v", got[8:], data[al:al+8])
	}

	ev, err = q.EnqueueCopyBuffer(s1, s2, al-8, 0, 16) // past s1's end, into s2's memory
	if ev != nil {
		_ = ev.Wait()
		_ = ev.Release()
	}
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "a range past the sub-buffer's end is ErrInvalidValue, as Oclgrind answers")
}
