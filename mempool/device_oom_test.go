package mempool_test

import (
	"os"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillDeviceEnv, set to 1, lets TestRealDeviceOutOfMemory fill the test
// device's memory. It is off by default: a GPU is often shared, and CPU
// runtimes never report out of memory (they take the host's memory
// instead), so the test also skips on a CPU device.
const fillDeviceEnv = "CLPOOL_FILL_DEVICE"

// TestRealDeviceOutOfMemory takes the out-of-memory ladder through a real
// device's refusal rather than allocator.Budget: it fills a GPU with
// chunks through a pool over allocator.Immediate until the driver refuses,
// gives half of them back to the pool, and asks for a larger chunk, which
// fits only once the ladder has freed cached ones. pooltest.NewOver checks
// that every device buffer was freed exactly once.
func TestRealDeviceOutOfMemory(t *testing.T) {
	if os.Getenv(fillDeviceEnv) != "1" {
		t.Skipf("fills the device's memory; set %s=1 to run it (on a GPU)", fillDeviceEnv)
	}
	q := cltest.Queue(t)
	d := q.Device()
	if d.Type&cl.DeviceTypeCPU != 0 {
		t.Skipf("%s is a CPU device: CPU runtimes never report out of memory", d.Name)
	}
	// Chunks of 1/16 of the device, so that the filling takes at most 16
	// allocations; 1.5 chunks must still be one buffer the device allows.
	chunk := min(d.GlobalMemSize/16, d.MaxMemAllocSize*2/3) &^ (1<<20 - 1)
	require.Positive(t, chunk)
	t.Logf("%s: %d MiB global, %d MiB largest buffer; chunks of %d MiB",
		d.Name, d.GlobalMemSize>>20, d.MaxMemAllocSize>>20, chunk>>20)

	for _, tc := range []struct {
		name string
		opts []mempool.Option
		// Whether freeing the cached chunks takes a retry: an arena frees
		// wholly free segments before it grows, so its first device
		// allocation already fits.
		retries bool
	}{
		{"exact bins", nil, true},
		{"arena", []mempool.Option{mempool.WithArena()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, count := pooltest.NewOver(t, q, nil, tc.opts...)
			var active []*mempool.PooledBuffer
			defer func() {
				for _, b := range active {
					assert.NoError(t, b.Close())
				}
			}()
			// Termination: the device holds at most GlobalMemSize/chunk
			// chunks; twice that and more means it never refused.
			maxChunks := int(d.GlobalMemSize/chunk)*2 + 8
			var refusal error
			for len(active) < maxChunks {
				b, err := p.Allocate(chunk)
				if err != nil {
					refusal = err
					break
				}
				active = append(active, b)
			}
			require.Error(t, refusal, "%d chunks of %d MiB and the device never refused", len(active), chunk>>20)
			require.ErrorIs(t, refusal, mempool.ErrOutOfMemory)
			var oom *mempool.OutOfMemoryError
			require.ErrorAs(t, refusal, &oom)
			var st cl.Status
			require.ErrorAs(t, oom.Err, &st, "the device's own refusal")
			assert.True(t, st.IsOutOfMemory(), "the device's own refusal: %v", oom.Err)
			assert.Equal(t, len(active), oom.ActiveBlocks)
			t.Logf("device refused chunk %d: %v", len(active)+1, refusal)
			require.GreaterOrEqual(t, len(active), 4, "too few chunks to test the ladder")

			// Give half back: the pool caches them.
			half := len(active) / 2
			for _, b := range active[:half] {
				require.NoError(t, b.Close())
			}
			active = active[half:]
			before := p.Stats()
			require.GreaterOrEqual(t, before.HeldBlocks, half, "an arena may hold free tails too")
			allocs := count.Stats().Allocs

			// 1.5 chunks match no cached block (an arena may still find
			// them in neighbouring free chunks of one segment): the ladder
			// frees cached chunks until the device takes the new buffer.
			big, err := p.Allocate(chunk + chunk/2)
			require.NoError(t, err, "the ladder frees the cached chunks and retries")
			active = append(active, big)
			after := p.Stats()
			if count.Stats().Allocs > allocs {
				assert.Equal(t, allocs+1, count.Stats().Allocs, "one device allocation served it")
				if tc.retries {
					assert.Greater(t, after.OOMRetries, before.OOMRetries)
				}
				assert.Less(t, after.HeldBlocks, before.HeldBlocks, "cached chunks were freed")
			}
			t.Logf("1.5 chunks: %d retries, %d device allocations, %d blocks held after",
				after.OOMRetries-before.OOMRetries, count.Stats().Allocs-allocs, after.HeldBlocks)

			// Everything back, then the whole device is usable again.
			for _, b := range active {
				require.NoError(t, b.Close())
			}
			active = nil
			require.NoError(t, p.FreeHeld())
			assert.Zero(t, p.Stats().ManagedBytes)
		})
	}
}
