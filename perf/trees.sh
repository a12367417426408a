# Sourced by `bench-pairs.sh` and `instructions.sh`, which build two revisions side by side: a
# scratch directory ($work) and the revisions checked out in temporary worktrees, all removed when
# the script exits.
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trees=()
cleanup() {
    for t in "${trees[@]}"; do git -C "$root" worktree remove --force "$t" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# Sets $dir to a checkout of revision $1 (empty: the working tree itself), a worktree under $work
# named after $2.
checkout() {
    dir=$root
    if [ -n "$1" ]; then
        dir=$work/tree-$2
        git -C "$root" worktree add --detach -q "$dir" "$1"
        trees+=("$dir")
    fi
}

# Runs `cargo $3...` in $dir with target directory $2 and prints the path of the executable it
# built for target $1 (nothing if it built none).
artifact() {
    local name=$1 target=$2
    shift 2
    (cd "$dir" && CARGO_TARGET_DIR=$target cargo "$@" --message-format=json 2>/dev/null) |
        jq -r --arg n "$name" \
            'select(.reason == "compiler-artifact" and .target.name == $n and .executable != null) | .executable' |
        tail -n 1
}
