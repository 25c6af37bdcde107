#!/usr/bin/env bash
# The checks a session runs on a lent NVIDIA machine, prepared here so that
# its few minutes of device time go to running them, not to writing them.
#
#   scripts/gpu_check.sh build      # here: test binaries, clpool, the ICD loader, into .gpu/
#   scripts/gpu_check.sh run 1      # there (device tool: carry [".gpu"]): the first half of mempool's tests
#   scripts/gpu_check.sh run 2      # there: the second half
#   scripts/gpu_check.sh run 3      # there: cl, allocator, array, out of memory, replay (about 4 minutes)
#
# Logs go under $OUT (or .gpu/logs). run selects NVIDIA's OpenCL
# (libnvidia-opencl.so.1) and runs each step alone, one process at a time,
# with its own timeout: on the H100 (session 44) mempool's short suite took
# about 10 minutes there in all (a context costs 0.4 s), more than one call
# may run, and suites run side by side in several processes made
# clCreateContext fail with CL_OUT_OF_HOST_MEMORY. Test binaries get
# -test.timeout, so a hang prints every goroutine's stack into the log. It
# prints one line per step. The .gpu/ folder must be ignored
# (echo /.gpu/ >> .git/info/exclude) and stays under the device tool's 64 MiB.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.gpu

build() {
	mkdir -p "$dir/lib"
	cp -L "$(ldconfig -p | awk '/libOpenCL.so.1 /{print $NF; exit}')" "$dir/lib/"
	for p in cl allocator mempool array; do
		(cd "$root" && go test -c -o "$dir/$p.test" "./$p/") || exit 1
	done
	(cd "$root" && go build -o "$dir/clpool" ./cmd/clpool) || exit 1
	# mempool's tests in two halves, one per call (run 1, run 2)
	(cd "$root/mempool" && "$dir/mempool.test" -test.list '^Test') >"$dir/mempool-tests.txt" || exit 1
	local n
	n=$(wc -l <"$dir/mempool-tests.txt")
	head -n $((n / 2)) "$dir/mempool-tests.txt" >"$dir/mempool-1.txt"
	tail -n +$((n / 2 + 1)) "$dir/mempool-tests.txt" >"$dir/mempool-2.txt"
	du -sh "$dir"
}

run() {
	local part=${1:-} logs=${OUT:-$dir/logs}
	case $part in 1 | 2 | 3) ;; *)
		echo "usage: $0 run 1|2|3" >&2
		return 2
		;;
	esac
	mkdir -p "$logs" /tmp/clpool-icd
	ldconfig -p | grep -q libOpenCL.so.1 || export LD_LIBRARY_PATH=$dir/lib
	echo libnvidia-opencl.so.1 >/tmp/clpool-icd/nvidia.icd
	export OCL_ICD_VENDORS=/tmp/clpool-icd CLPOOL_DEVICE=nvidia
	nvidia-smi -L
	step() { # step NAME PKG TIMEOUT ARGS...: runs PKG's test binary in its folder
		local name=$1 pkg=$2 limit=$3
		shift 3
		(cd "$root/$pkg" && timeout "$limit" "$dir/$pkg.test" -test.timeout $((limit - 10))s "$@") >"$logs/$name.log" 2>&1
		local rc=$?
		echo "$name: rc $rc; $(grep -c '^--- PASS' "$logs/$name.log") PASS, $(grep -c '^--- FAIL' "$logs/$name.log") FAIL; last: $(grep '^=== RUN' "$logs/$name.log" | tail -1)"
		grep -E '^(--- FAIL|panic|SIGSEGV|SIGABRT|fatal error)' "$logs/$name.log" | head -10
		return $rc
	}
	if [ "$part" != 3 ]; then
		local tests
		tests="^($(paste -sd'|' "$dir/mempool-$part.txt"))\$"
		step "mempool-$part" mempool 330 -test.short -test.v -test.count 1 -test.run "$tests"
		return
	fi
	step cl cl 90 -test.short -test.count 1
	step allocator allocator 60 -test.short -test.count 1
	step array array 120 -test.short -test.count 1
	CLPOOL_FILL_DEVICE=1 step oom mempool 120 -test.run 'TestRealDeviceOutOfMemory' -test.v -test.count 1
	for t in cg mlp; do
		(cd "$root" && timeout 60 "$dir/clpool" replay -configs pool-immediate,pool-arena -warmup 1 -runs 3 "testdata/$t.tsv")
	done
}

case ${1:-} in
build) build ;;
run) run "${2:-}" ;;
*)
	echo "usage: $0 build|run 1|2|3" >&2
	exit 2
	;;
esac
