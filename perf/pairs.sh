#!/usr/bin/env bash
# Compare two or more builds of the harness on a machine whose speed moves under it (this VM).
#
#   perf/pairs.sh ROUNDS ROW 'HARNESS ARGS' BIN_A BIN_B [BIN_C ...]
#   perf/pairs.sh 20 'single producer, ring-like' 'tput --subs 1 --runs 3 --only ring-like,Sleep' a b
#
# The VM's states last seconds to minutes and move every contender by up to 2x, so medians taken
# over separate sets of runs say which state each set landed in more than which build is faster.
# Here the binaries run back to back, in an order that flips every round, and each round gives
# the ratio of every binary's figure to BIN_A's in that round; the median of those ratios is the
# figure to quote. ROW picks the first table row whose contender name contains it; its median
# column is the figure (for latency tables, lower is better: a ratio under 1 is then a gain).
# Each round also prints the floor range from that row's table title, so a reader can see which
# state the pair sampled. Set TABLE to take the row from the first table whose title contains it
# (`TABLE='2→2' perf/pairs.sh ...` when the arguments run several fan-outs), or from each of
# several tables of the same runs, their titles' parts separated by `;` (`TABLE='burst 1, no;burst
# 10, no;burst 100, no'`: one set of runs, a ratio for each). Build each binary
# with the workspace's code alignment (build in this workspace and copy `target/release/logbus-perf`
# aside), or placement decides the result. Give `--runs 3` or more: a process's first run writes
# into fresh memory (logbus's ring-like topics map theirs when created, since stop 26; the unbounded
# ones and the channels do not), and its figure is the cold one only (the full run's median of 5 is
# mostly warm runs); a batch publish's prefetch distance measured ×1.01 with `--runs 1` and ×1.09
# with 3.
set -euo pipefail

if [ $# -lt 5 ]; then
    sed -n 4,5p "$0" | sed 's/^# *//'
    exit 2
fi
rounds=$1 row=$2 args=$3
shift 3
bins=("$@")
n=${#bins[@]}
ratios=$(mktemp)
out=$(mktemp)
trap 'rm -f "$ratios" "$out"' EXIT
IFS=';' read -r -a tables <<< "${TABLE:-}"
((${#tables[@]})) || tables=("")

# Prints "FIGURE FLOOR" for the first row matching $row in the first table whose title contains
# $1, in the harness output in $out.
figure() {
    awk -F'|' -v row="$row" -v table="$1" '
        /^## / { title = $0 }
        index($2, row) && index(title, table) && !done {
            v = $3; gsub(/ /, "", v)
            floor = "?"
            if (match(title, /floor [0-9]+ns(–[0-9]+ns)?/)) floor = substr(title, RSTART + 6, RLENGTH - 6)
            print v, floor; done = 1
        }' "$out"
}

for ((r = 1; r <= rounds; r++)); do
    order=()
    for ((i = 0; i < n; i++)); do
        if ((r % 2)); then order+=("$i"); else order+=("$((n - 1 - i))"); fi
    done
    # This round's only: a run that prints no figure leaves "?". Indexed by table, then binary.
    declare -A value=() floor=()
    for i in "${order[@]}"; do
        # shellcheck disable=SC2086 # the harness arguments are meant to split
        "${bins[i]}" $args > "$out" 2>/dev/null || true
        for j in "${!tables[@]}"; do
            read -r "value[$j,$i]" "floor[$j,$i]" < <(figure "${tables[j]}") || true
        done
    done
    for j in "${!tables[@]}"; do
        line="round $r:"
        ((${#tables[@]} > 1)) && line+=" [${tables[j]}]"
        for ((i = 0; i < n; i++)); do
            line+=" ${value[$j,$i]:-?} (floor ${floor[$j,$i]:-?})"
            if ((i > 0)); then
                ratio=$(awk -v a="${value[$j,0]:-0}" -v b="${value[$j,$i]:-0}" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "?" }')
                line+=" r$ratio"
                echo "$j $i $ratio" >> "$ratios"
            fi
        done
        echo "$line"
    done
    unset value floor
done

for j in "${!tables[@]}"; do
    for ((i = 1; i < n; i++)); do
        label="${bins[i]} / ${bins[0]}"
        ((${#tables[@]} > 1)) && label="[${tables[j]}] $label"
        awk -v j="$j" -v i="$i" -v label="$label" '
            $1 == j && $2 == i && $3 != "?" { v[++k] = $3 }
            END {
                if (!k) { print label ": no figures"; exit }
                # insertion sort: k is the number of rounds
                for (a = 2; a <= k; a++) { x = v[a]; b = a - 1; while (b > 0 && v[b] > x) { v[b + 1] = v[b]; b-- } v[b + 1] = x }
                med = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
                printf "%s: median ratio %.3f over %d rounds (lowest %.3f, highest %.3f)\n", label, med, k, v[1], v[k]
            }' "$ratios"
    done
done
