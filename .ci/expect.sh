# Sourced by .ci/run. expect CODE SESSION [ARGS...]: run a nox session and insist on its exit code.
# The session must exist first: nox exits 3 for "Sessions not found" (the noxfile turns a pack session typo into
# 2, but not every missing name is one), which is also the code of a pack session whose GPU lanes were skipped,
# so a renamed or removed pack would otherwise pass as skipped.
# With CI_RECEIPTS set, the session's receipts go there and tracking.toml is left alone: CI checks the lanes
# by their exit codes and never rewrites the checkout's receipts, which docs/filings and readiness are read from.
# It also passes --skip-current: a lane whose committed receipt passed for today's pin, series, reproducer and
# helpers (readiness's test) is answered by that receipt, its build still made and import-checked; any change to
# those inputs runs it again here (issue 49: CI at most 30 minutes without dropping a check).
_ci_sessions=""
expect() {
    local want=$1 session=$2
    shift
    if [ -z "$_ci_sessions" ]; then
        _ci_sessions=$(nox --list-sessions 2>/dev/null) || { echo "ci: 'nox --list-sessions' failed" >&2; exit 1; }
    fi
    if ! grep -qE "^[*-] ${session}( |\$)" <<<"$_ci_sessions"; then
        echo "ci: nox has no session '$session' (a pack renamed or removed from tracking.toml?)" >&2
        exit 1
    fi
    local args=("$@")
    if [ -n "${CI_RECEIPTS:-}" ]; then
        local sep=--
        for a in "${args[@]}"; do [ "$a" = -- ] && sep=; done
        args+=(${sep:+"$sep"} --receipts-dir "$CI_RECEIPTS" --no-tracking --skip-current)
    fi
    set +e
    nox --error-on-missing-interpreters -s "${args[@]}"
    local rc=$?
    set -e
    if [ "$rc" -ne "$want" ]; then
        echo "ci: expected 'nox -s $*' to exit $want, got $rc" >&2
        exit 1
    fi
    echo "ci: 'nox -s $*' exited $want as expected"
}
