# Sourced by .ci/run (after `step`). Steps that run beside the others: most CI steps are one process (an install,
# a build, an import), so a 2-core host does two chains of them at once.
#
# beside NAME COMMAND...: run COMMAND (steps of its own) in the background, its output in .ci-logs/NAME.log,
# its store apart (PATCHLANE_HOME=.ci-cache-NAME: no wait on another step's store lock).
# joined NAME: wait for it, print its log whole, and fail as it failed.
# A run that ends before `joined` (a step failed) stops it, nox and every child with it (its own process group).
mkdir -p .ci-logs
declare -A beside_pid
beside() {
    local name=$1
    shift
    echo "ci: $name starts beside the other steps (its log, .ci-logs/$name.log, is printed when it ends)" >&2
    set -m  # its own process group: a run that stops early takes it down whole (the trap below), nox and all
    ( PATCHLANE_HOME="$PWD/.ci-cache-$name" "$@" ) < /dev/null > ".ci-logs/$name.log" 2>&1 &
    beside_pid[$name]=$!
    set +m
}
joined() {
    local name=$1 rc=0
    wait "${beside_pid[$name]}" || rc=$?
    echo "ci: ---- .ci-logs/$name.log (ran beside the steps above) ----" >&2
    cat ".ci-logs/$name.log" >&2
    echo "ci: ---- end of .ci-logs/$name.log ----" >&2
    unset "beside_pid[$name]"
    [ "$rc" -eq 0 ] || { echo "ci: $name failed (exit $rc)" >&2; exit "$rc"; }
}
stop_beside() {
    local pid
    for pid in "${beside_pid[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
}
trap stop_beside EXIT
