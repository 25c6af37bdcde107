"""Replays an allocation trace through PyOpenCL's allocators and MemoryPool and
through clpool's, in the same run on the same device, and prints both with the
ratio. Run by `make bench-pyopencl`; needs Debian's python3-pyopencl.

    /usr/bin/python3 scripts/bench_pyopencl.py CLPOOL_BINARY TRACE [RUNS [WARMUP]]

Both sides replay WARMUP untimed runs (default 50) before each timed set:
fewer leave clpool's figures depending on what ran before in the process.
"""
import statistics
import subprocess
import sys
import time

import pyopencl as cl
import pyopencl.tools as cl_tools


def read_trace(path):
    events = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2 or parts[0] not in ("a", "f"):
                continue
            events.append((parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else 0))
    return events


def replay(events, alloc, free):
    live = {}
    for op, ident, size in events:
        if op == "a":
            live[ident] = alloc(size)
        else:
            free(live.pop(ident))
    for buf in live.values():
        free(buf)


def release(buf):
    if buf is not None:
        buf.release()


def timed(events, queue, alloc, free, warmup, runs):
    figures = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        replay(events, alloc, free)
        elapsed = time.perf_counter() - start
        queue.finish()
        if i >= warmup:
            figures.append(elapsed * 1e9 / len(events))
    return statistics.median(figures)


def main():
    binary, trace_path = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    warmup = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    events = read_trace(trace_path)

    platform = next(p for p in cl.get_platforms() if "portable" in p.name.lower() or "pocl" in p.version.lower())
    ctx = cl.Context(platform.get_devices())
    queue = cl.CommandQueue(ctx)

    py = {}
    deferred = cl_tools.DeferredAllocator(ctx)
    py["deferred"] = timed(events, queue, deferred, release, warmup, runs)
    immediate = cl_tools.ImmediateAllocator(queue)
    py["immediate"] = timed(events, queue, immediate, release, warmup, runs)
    pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
    py["pool-immediate"] = timed(events, queue, pool.allocate, release, warmup, runs)
    py_peak_managed = pool.managed_bytes  # what it holds once everything is freed

    out = subprocess.run([binary, "replay", "-format", "tsv", "-runs", str(runs), "-warmup", str(warmup),
                          "-configs", "deferred,immediate,pool-immediate,pool-immediate-nodrop", trace_path],
                         check=True, capture_output=True, text=True).stdout
    ours = {}
    for line in out.splitlines()[1:]:
        fields = line.split("\t")
        ours[fields[0]] = float(fields[1])

    print("%s: %d events, %s, median of %d runs each after %d warm-up runs, PyOpenCL %s" %
          (trace_path, len(events), ctx.devices[0].name, runs, warmup, cl.VERSION_TEXT))
    print("%-34s %14s %14s %8s" % ("configuration", "PyOpenCL ns/ev", "clpool ns/ev", "speedup"))
    rows = [("raw DeferredAllocator", "deferred", "deferred"),
            ("raw ImmediateAllocator", "immediate", "immediate"),
            ("MemoryPool(ImmediateAllocator)", "pool-immediate", "pool-immediate"),
            ("  vs clpool WithDropSafety(false)", "pool-immediate", "pool-immediate-nodrop")]
    for label, pk, ok in rows:
        print("%-34s %14.1f %14.1f %7.2fx" % (label, py[pk], ours[ok], py[pk] / ours[ok]))
    print("PyOpenCL pool holds %d bytes after the replay" % py_peak_managed)


if __name__ == "__main__":
    main()
