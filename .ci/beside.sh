# Sourced by .ci/run (after `step`). Steps that run beside the others: most CI steps are one process (an install,
# a build, an import), so a 2-core host does two chains of them at once.
#
# beside NAME COMMAND...: run COMMAND (steps of its own) in the background, its output in .ci-logs/NAME.log,
# its store apart (PATCHLANE_HOME=.ci-cache-NAME: no wait on another step's store lock), within
# $BESIDE_LIMIT seconds (default 3600): a chain still running then is stopped, and `joined` says so.
# joined NAME: wait for it, print its log whole, and fail as it failed; a chain that exits 0 without
# finishing a single `step` ran nothing, and fails too.
# A run that ends before `joined` (a step failed, SIGTERM, SIGINT, SIGHUP) stops every chain, nox and every
# child with it (its own process group), and prints each stopped chain's log. A run killed outright (SIGKILL
# leaves no trap to run) is noticed by each chain's watcher, which stops the chain within seconds.
mkdir -p .ci-logs
declare -A beside_pid beside_watch
BESIDE_LIMIT=${BESIDE_LIMIT:-3600}
beside_run=$$  # the run every chain belongs to; a chain whose run is gone stops

beside() {
    local name=$1
    shift
    echo "ci: $name starts beside the other steps (its log, .ci-logs/$name.log, is printed when it ends;" \
         "at most $BESIDE_LIMIT s)" >&2
    rm -f ".ci-logs/$name.stopped"
    set -m  # its own process group: a run that stops early takes it down whole (the trap below), nox and all
    ( PATCHLANE_HOME="$PWD/.ci-cache-$name" "$@" ) < /dev/null > ".ci-logs/$name.log" 2>&1 &
    local pid=$!
    beside_pid[$name]=$pid
    # the watcher: the chain's time bound, and the run's death (SIGKILL runs no trap) both stop the chain
    (
        trap - EXIT
        waited=0
        while kill -0 "$pid" 2>/dev/null; do
            if ! kill -0 "$beside_run" 2>/dev/null; then
                echo "the run ($beside_run) is gone" > ".ci-logs/$name.stopped"
                kill -TERM -- "-$pid" 2>/dev/null
                break
            fi
            if [ "$waited" -ge "$BESIDE_LIMIT" ]; then
                echo "ran past its bound of $BESIDE_LIMIT s" > ".ci-logs/$name.stopped"
                kill -TERM -- "-$pid" 2>/dev/null
                sleep 10
                kill -KILL -- "-$pid" 2>/dev/null
                break
            fi
            sleep 1
            waited=$((waited + 1))
        done
    ) < /dev/null > /dev/null 2>&1 &
    beside_watch[$name]=$!
    set +m
}

_beside_log() {  # _beside_log NAME WHY: the chain's log, whole, between two lines that say which and why
    echo "ci: ---- .ci-logs/$1.log ($2) ----" >&2
    cat ".ci-logs/$1.log" >&2
    echo "ci: ---- end of .ci-logs/$1.log ----" >&2
}

joined() {
    local name=$1 rc=0
    wait "${beside_pid[$name]}" || rc=$?
    kill "${beside_watch[$name]}" 2>/dev/null || true
    _beside_log "$name" "ran beside the steps above"
    unset "beside_pid[$name]" "beside_watch[$name]"
    if [ -f ".ci-logs/$name.stopped" ]; then
        echo "ci: $name stopped: $(cat ".ci-logs/$name.stopped") (exit ${rc})" >&2
        exit $((rc == 0 ? 1 : rc))
    fi
    [ "$rc" -eq 0 ] || { echo "ci: $name failed (exit $rc)" >&2; exit "$rc"; }
    # `step` prints "ci: step NAME: ..." when a step ends: a chain that printed none ran nothing
    grep -q '^ci: step .*: ' ".ci-logs/$name.log" \
        || { echo "ci: $name exited 0 but finished no step: it ran nothing" >&2; exit 1; }
}

stop_beside() {
    local name
    for name in "${!beside_pid[@]}"; do
        kill -TERM -- "-${beside_pid[$name]}" 2>/dev/null || true
        kill "${beside_watch[$name]}" 2>/dev/null || true
    done
    for name in "${!beside_pid[@]}"; do
        wait "${beside_pid[$name]}" 2>/dev/null || true
        _beside_log "$name" "stopped: the run ended before it joined"
    done
}
trap stop_beside EXIT
trap 'exit 143' TERM HUP
trap 'exit 130' INT
