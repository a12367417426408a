#!/usr/bin/env bash
# Count the instructions a record costs on the engine's single-thread paths, for two revisions,
# under valgrind's callgrind.
#
#   perf/instructions.sh BASE [OTHER] [PATHS]
#   perf/instructions.sh 8d5c279                     # BASE against the working tree, every path
#   perf/instructions.sh HEAD~3 HEAD 'read poll'
#
# Timings on this VM move by a third between runs, and the criterion benches of a loop can differ
# by 10-20% between builds whose code differs only where the loop never goes; this VM gives no
# hardware counters to tell placement from work. Callgrind counts instructions exactly, the same
# run after run: a loop that gained instructions shows here to the instruction, whatever the host
# is doing. It says nothing about stalls, cache misses or another core, so it complements the
# benches (`bench-pairs.sh`) and the harness (`pairs.sh`); it does not replace them.
#
# Each path is `perf/src/bin/count.rs`'s (see there; `count paths` lists them); the working
# tree's driver is built into both revisions, so an older BASE needs only the public calls it
# makes. The figure is the inclusive count of the function the records go through, at 200,000
# records less at 100,000, divided by 100,000: the set-up cancels out.
#
# Valgrind passes `membarrier` and `rdtsc` through, so the engine takes the paths a native
# run takes (`ring-publish` is the inlined fast path, `publish` the stamped one). Valgrind runs one
# thread at a time, so `subscription` includes whatever spinning its thread does at the end.
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n 5,7p "$0" | sed 's/^# *//'
    exit 2
fi
for tool in valgrind callgrind_annotate jq; do
    command -v "$tool" > /dev/null || { echo "instructions.sh needs $tool" >&2; exit 1; }
done
base=$1 other=${2:-} paths=${3:-}
# shellcheck source=perf/trees.sh
. "$(dirname "$0")/trees.sh"

# Builds the driver in revision $1 (empty: the working tree) with target directory $3; copies it
# to $2.
build() {
    local rev=$1 out=$2 exe
    checkout "$rev" "$(basename "$out")"
    if [ -n "$rev" ]; then
        mkdir -p "$dir/perf/src/bin"
        cp "$root/perf/src/bin/count.rs" "$dir/perf/src/bin/count.rs"
    fi
    exe=$(artifact count "$root/target/instructions/$3" build --release -p logbus-perf --bin count)
    if [ -z "$exe" ]; then
        echo "the driver did not build in ${rev:-the working tree}" >&2
        exit 1
    fi
    cp "$exe" "$out"
}

# The function a path's records go through.
function_of() {
    case $1 in
        subscription) echo 'logbus::subscription::Context<T>::run' ;;
        ring-publish | ring-multi-publish | multi-publish) echo 'count::measure_publish' ;;
        ring-publish-slice | ring-multi-publish-slice) echo 'count::measure_publish_slice' ;;
        topic-publish-single) echo 'count::measure_topic_publish' ;;
        multi-read) echo 'count::measure_read' ;;
        multi-read-batch) echo 'count::measure_read_batch' ;;
        *) echo "count::measure_${1//-/_}" ;;
    esac
}

# Inclusive instructions of path $2's function when binary $1 runs it over $3 records.
inclusive() {
    local out=$work/callgrind.out
    valgrind --tool=callgrind --callgrind-out-file="$out" "$1" "$2" "$3" > /dev/null 2>&1 ||
        { echo "$1 $2 $3 failed under valgrind" >&2; exit 1; }
    callgrind_annotate --inclusive=yes --threshold=100 "$out" 2> /dev/null |
        awk -v f="$(function_of "$2")" '
            { i = index($0, ":" f " ["); if (i) { n = $1; gsub(/,/, "", n); print n; exit } }'
}

per_record() {
    local small large
    small=$(inclusive "$1" "$2" 100000)
    large=$(inclusive "$1" "$2" 200000)
    if [ -z "$small" ] || [ -z "$large" ]; then
        echo "-"
    else
        awk -v s="$small" -v l="$large" 'BEGIN { printf "%.1f", (l - s) / 100000 }'
    fi
}

echo "building $base and ${other:-the working tree}" >&2
build "$base" "$work/a" base
build "$other" "$work/b" other
# Every path the working tree's driver has (`count paths`), unless the caller named some.
[ -n "$paths" ] || paths=$("$work/b" paths)

echo "# callgrind, instructions per record: ${base} and ${other:-the working tree}"
width=$(for path in path $paths; do echo "${#path}"; done | sort -n | tail -1)
printf '%-*s %10s %10s %8s\n' "$width" path "$base" "${other:-tree}" change
for path in $paths; do
    a=$(per_record "$work/a" "$path")
    b=$(per_record "$work/b" "$path")
    change=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%+.1f%%", (b / a - 1) * 100; else print "-" }')
    printf '%-*s %10s %10s %8s\n' "$width" "$path" "$a" "$b" "$change"
done
