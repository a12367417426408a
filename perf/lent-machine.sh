#!/usr/bin/env bash
# The perf harness on a lent many-core machine, as one prepared run (every thread on its own core).
#
#   perf/lent-machine.sh build      # here: a static build into .devbin/ (add `/.devbin/` to
#                                   # .git/info/exclude, and carry .devbin to the machine)
#   perf/lent-machine.sh build-b REV [NAME]  # here: the same for a git revision (a branch to
#                                   # compare), into .devbin/logbus-perf-NAME (default: b); one
#                                   # per experiment, so that one lease compares several
#   perf/lent-machine.sh build-patch FILE [NAME]  # here: the same for the head with a patch
#                                   # applied (an experiment kept in perf/experiments/), into
#                                   # .devbin/logbus-perf-NAME (default: the file's name)
#   perf/lent-machine.sh run        # there: the fan-out scenarios, output under $OUT (or /tmp);
#                                   # with -NAME binaries, first an A/B of them all (see `ab`)
#   perf/lent-machine.sh ab [ARGS]  # there: the head and every -NAME binary alternated (the order
#                                   # reversed every other round), 3 rounds, on ARGS (default:
#                                   # the multi-producer fan-outs), into $OUT/ab.md
#
# Sized from the first such runs (16-core Xeon, 2026-11-30). With a core per subscriber the channel
# peers fall to 2–20 M/s, so one run of every tput table costs them ~60 s, while logbus and the
# Disruptor take ~10 s for all four tables. So logbus and the Disruptor get medians of 5 and the
# other peers one run (a second pass, its own tables). About 4.5 minutes in all (stop 45); each
# scenario has its own time limit (about 9 minutes together) so that a slow table cannot eat the
# others, and the output is written as it comes, so a run cut short still brings back what it
# finished. Each experiment binary adds about a minute of `ab` before it (2 minutes allowed).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.devbin/logbus-perf
# A static build of the tree in the current directory into .devbin/$2, with target dir $1.
static_build() {
    RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -p logbus-perf \
        --target x86_64-unknown-linux-gnu --target-dir "$1" || return
    mkdir -p "$root/.devbin"
    cp "$1/x86_64-unknown-linux-gnu/release/logbus-perf" "$root/.devbin/$2"
}
root=$PWD
# The experiment binaries built by build-b and build-patch (not their .rev notes), one a line.
experiments() {
    for b in "$bin"-*; do
        if [ -x "$b" ] && [ "${b%.rev}" = "$b" ]; then echo "$b"; fi
    done
}
case "${1:-}" in
build)
    static_build "$root/target/static" logbus-perf || exit
    echo "built $bin; carry .devbin and run: bash perf/lent-machine.sh run"
    ;;
build-b | build-patch)
    what=${2:?usage: $0 build-b REV [NAME] | build-patch FILE [NAME]}
    if [ "$1" = build-b ]; then
        rev=$what name=${3:-b}
    else
        [ -f "$what" ] || { echo "no patch $what" >&2; exit 2; }
        patch=$(realpath "$what") rev=HEAD name=${3:-$(basename "$what" .patch | tr -c 'A-Za-z0-9_\n' _)}
    fi
    [[ $name =~ ^[A-Za-z0-9_]+$ ]] || { echo "NAME: letters, digits and _ only" >&2; exit 2; }
    tree=$(mktemp -d)
    git worktree add --detach "$tree" "$rev" >/dev/null || exit
    if [ -n "${patch:-}" ]; then
        git -C "$tree" apply "$patch" || { git worktree remove --force "$tree"; exit 1; }
    fi
    (cd "$tree" && static_build "$root/target/static-b" "logbus-perf-$name")
    rc=$?
    if [ $rc -eq 0 ]; then
        { git -C "$tree" log -1 --format="%h %s"; [ -n "${patch:-}" ] && echo " + $what"; } |
            tr -d '\n' > "$bin-$name.rev"
    fi
    git worktree remove --force "$tree"
    [ $rc -eq 0 ] && echo "built $bin-$name from $(cat "$bin-$name.rev")"
    exit $rc
    ;;
ab)
    out=${OUT:-/tmp}
    shift
    [ $# -gt 0 ] || set -- tput --only "multi producer, ring-like;Sleep;zzz" --runs 3
    mapfile -t bins < <(echo "$bin"; experiments)
    for b in "${bins[@]:1}"; do
        echo "=== $b: $(cat "$b.rev" 2>/dev/null)" | tee -a "$out/ab.md"
    done
    for round in 1 2 3; do
        order=("${bins[@]}")
        if [ $((round % 2)) -eq 0 ]; then
            order=()
            for ((i = ${#bins[@]} - 1; i >= 0; i--)); do order+=("${bins[i]}"); done
        fi
        for b in "${order[@]}"; do
            echo "=== ab round $round: $b $* ($(date -u +%T))" | tee -a "$out/ab.md"
            timeout 60 "$b" "$@" --no-wait 2>&1 | grep -E '^## |logbus|Sleep' | tee -a "$out/ab.md"
        done
    done
    ;;
run)
    out=${OUT:-/tmp}
    { nproc; lscpu | head -20; } > "$out/machine.txt" 2>&1
    scenario() {
        local limit=$1 only=$2
        shift 2
        echo "=== $* ($(date -u +%T))" | tee -a "$out/perf.md"
        timeout "$limit" "$bin" "$@" --no-wait --only "$only" 2>&1 | tee -a "$out/perf.md"
    }
    count=$(experiments | wc -l)
    [ "$count" -gt 0 ] && timeout $((120 * count)) "$0" ab
    fast="logbus;disruptor;zzz"
    scenario 90 "$fast" tput --runs 5
    scenario 60 "$fast" lat --runs 5
    scenario 60 "$fast" batch --runs 3
    # What a minimal watermark ring reaches 1→1 there, beside logbus, and what a subscriber core
    # reads when it only reads (see perf/src/ceiling.rs).
    scenario 45 "$fast;minimal" ceiling --runs 3
    # Both tables: at 45 s (stop 45) the 1→2 one was cut.
    scenario 100 "$fast" lat-slow --runs 3
    # The channel peers, one run ("bus" also selects the logbus rows again, which cost little).
    peers="crossbeam;kanal;tokio;bus;multiqueue2;zzz"
    scenario 120 "$peers" tput --runs 1
    scenario 40 "$peers" lat --runs 1
    echo "=== done ($(date -u +%T))"
    ;;
*)
    echo "usage: $0 build|build-b REV|run|ab [ARGS]" >&2
    exit 2
    ;;
esac
