#!/usr/bin/env bash
# Compares benchmarks of two builds side by side, alternating them round
# by round on the same machine, and prints each round's figures and the
# median ns/op of each build.
#
#   scripts/bench_compare.sh OLD_COMMIT ROUNDS 'BENCH_REGEXP' [PKG]
#
# The old build is a git worktree of OLD_COMMIT in $TMPDIR; the current
# working tree is the new one. Benchmark files the old commit lacks are
# copied into its worktree (mempool/bench_plain_test.go, bench_replay_test.go).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
old=$(git -C "$root" rev-parse --short "$1") rounds=$2 re=$3 pkg=${4:-./mempool/} # HEAD: today's, not the worktree's first
wt=${TMPDIR:-/tmp}/clpool-bench-$old
[ -d "$wt" ] || git -C "$root" worktree add -q --detach "$wt" "$old"
for f in bench_plain_test.go bench_replay_test.go; do
	git -C "$wt" cat-file -e "HEAD:mempool/$f" 2>/dev/null || cp "$root/mempool/$f" "$wt/mempool/"
done
out=$(mktemp)
for i in $(seq "$rounds"); do
	for side in old new; do
		dir=$root
		[ $side = old ] && dir=$wt
		(cd "$dir" && go test -run '^$' -bench "$re" -count 1 "$pkg") |
			awk -v s=$side '/^Benchmark/ {print s, $1, $3}' | tee -a "$out"
	done
done
echo "medians (ns/op):"
for side in old new; do
	awk -v s=$side '$1 == s {print $2}' "$out" | sort -u | while read -r b; do
		awk -v s=$side -v b="$b" '$1 == s && $2 == b {print $3}' "$out" | sort -n |
			awk -v s=$side -v b="$b" '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s %s %.1f\n", s, b, m}'
	done
done
rm -f "$out"
