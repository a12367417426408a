#!/usr/bin/env bash
# Compare the criterion benches (`benches/log.rs`) of two revisions, run back to back.
#
#   perf/bench-pairs.sh BASE [OTHER] [ROUNDS] [FILTER]
#   perf/bench-pairs.sh 4f7725b                      # BASE against the working tree, 3 rounds
#   perf/bench-pairs.sh 4f7725b HEAD 5 'read/|consume/'
#
# The harness (`pairs.sh`) reads in batches and compares logbus with its peers; these benches time
# the single-thread paths a user calls one record at a time (`Reader::next`, `Consumer::poll`, a
# subscription's loop), where a call that stops being inlined costs ×2–3 and nothing else shows
# it. Run this against the previous landing before a stop ends.
#
# OTHER defaults to the working tree (uncommitted changes included); a revision is checked out in
# a temporary worktree. Each side has its own target directory (`target/bench-pairs/{base,other}`),
# kept between calls so the dependencies build once: cargo names the bench binary alike for every
# checkout and, with one directory, took a checkout's build for another's. Each round runs the two binaries back to back, in an order that
# flips every round (this VM's speed moves by up to 2× over minutes; back-to-back pairs hold
# still), and takes each bench's time per iteration from criterion's `bencher` output. The figure
# per bench is the median over rounds of BASE's time / OTHER's time: above 1, OTHER is faster.
# A round's pair on this machine spreads about ±5% for the single-thread benches and more for the
# cross-thread ones, whose timing includes waking threads; read a ratio inside 0.9–1.1 as alike.
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n 4,6p "$0" | sed 's/^# *//'
    exit 2
fi
base=$1 other=${2:-} rounds=${3:-3} filter=${4:-}
# shellcheck source=perf/trees.sh
. "$(dirname "$0")/trees.sh"

# Builds the bench binary of revision $1 (empty: the working tree) in target directory $3 and
# copies it to $2.
build() {
    local rev=$1 out=$2 exe
    checkout "$rev" "$(basename "$out")"
    exe=$(artifact log "$root/target/bench-pairs/$3" bench --bench log --no-run)
    if [ -z "$exe" ]; then
        echo "no bench binary built for ${rev:-the working tree}" >&2
        exit 1
    fi
    cp "$exe" "$out"
}

echo "building $base and ${other:-the working tree}" >&2
build "$base" "$work/a" base
build "$other" "$work/b" other

times=$work/times # lines: ROUND BINARY BENCH NS_PER_ITER
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(a b); else order=(b a); fi
    for bin in "${order[@]}"; do
        # Criterion writes its data under the working directory's target/: keep it in $work.
        # shellcheck disable=SC2086 # an empty filter runs every bench
        (cd "$work" && "$work/$bin" --bench ${filter:+"$filter"} --output-format bencher \
            --warm-up-time 1 --measurement-time 2 --noplot 2>/dev/null) |
            awk -v r="$r" -v b="$bin" '$1 == "test" && $4 == "bench:" { t = $5; gsub(/,/, "", t); print r, b, $2, t }' \
                >> "$times"
    done
    echo "round $r of $rounds done" >&2
done

echo "# criterion, ${base} against ${other:-the working tree}: time per iteration, ${base} / ${other:-working tree}, $rounds rounds"
awk '
    { t[$1, $2, $3] = $4; if (!($3 in seen)) { seen[$3] = 1; names[++n] = $3 } if ($1 > rounds) rounds = $1 }
    END {
        printf "%-40s %8s %8s %8s\n", "bench", "median", "lowest", "highest"
        for (i = 1; i <= n; i++) {
            k = 0
            for (r = 1; r <= rounds; r++)
                if ((r, "a", names[i]) in t && (r, "b", names[i]) in t && t[r, "b", names[i]] > 0)
                    v[++k] = t[r, "a", names[i]] / t[r, "b", names[i]]
            if (!k) { printf "%-40s %8s\n", names[i], "(in one build only)"; continue }
            for (x = 2; x <= k; x++) { y = v[x]; z = x - 1; while (z > 0 && v[z] > y) { v[z + 1] = v[z]; z-- } v[z + 1] = y }
            med = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
            printf "%-40s %8.3f %8.3f %8.3f\n", names[i], med, v[1], v[k]
        }
    }' "$times"
