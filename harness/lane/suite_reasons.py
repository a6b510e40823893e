"""Why a suite's failing cases failed: the exception each traceback in a lane's pytest log ended with.

``suite`` judges cases by their outcomes alone (what the receipts record); this module reads the logs beside
those receipts so that ``harness suite compare`` and the filing body can say, per case, what was raised: a
failure of the change, of the base, or of the host (out of GPU memory, a port in use).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from harness.lane.suite import BAD, Comparison

# what a failing case says when the host, not the code, ran short: CUDA or Triton out of GPU memory, a
# torch.distributed store whose port another run holds
HOST_FAILURE = re.compile(r"out of memory|EADDRINUSE|address already in use", re.I)


def host_failures(details: Mapping | None, log: str) -> dict[str, str]:
    """The cases of one suite run (its sentinel ``details`` and pytest ``log``) that failed for want of the
    host's resources: node id -> the exception. Such a run says nothing about the change; it must run again."""
    failing = [node for node, outcome in ((details or {}).get("cases") or {}).items() if outcome in BAD]
    return {node: why for node, why in failure_reasons(log, failing).items() if HOST_FAILURE.search(why)}


def explain_from_logs(comparison: Comparison, logs: Iterable[tuple[bool, str]]) -> Comparison:
    """``comparison`` with the reasons read from its lanes' pytest logs, given as (patched, log text)."""
    why: dict[bool, dict[str, str]] = {False: {}, True: {}}
    for patched, text in logs:
        failing = [c.id for c in comparison.cases if (c.patched if patched else c.base) in BAD]
        why[patched].update(failure_reasons(text, failing))
    return comparison.explained(why[False], why[True])


def failing_without_change(comparison: Comparison, most: int = 3) -> str:
    """The cases that fail on the base too, grouped by file and exception: ``20 in test_x.py (KeyError: 'a')``."""
    groups: dict[tuple[str, str], int] = {}
    for c in comparison.cases:
        if c.verdict in ("fails on both", "base-only failure"):
            key = (c.id.split("::", 1)[0].rsplit("/", 1)[-1], c.why_base or "no exception in the log")
            groups[key] = groups.get(key, 0) + 1
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = [f"{n} in {name} ({why})" for (name, why), n in ranked[:most]]
    if len(ranked) > most:
        parts.append(f"{sum(n for _, n in ranked[most:])} more")
    return ", ".join(parts)


_TRACEBACK_HEAD = re.compile(r"^_+ (\S.*?) _+$")  # pytest's "____ test_x[p] ____" above each failure
_RAISED = re.compile(r"^E\s+(\S.*)$")
_SECTION = re.compile(r"^={3,} (.+?) ={3,}$")


def failure_reasons(log: str, nodes: Iterable[str]) -> dict[str, str]:
    """Node id -> the first ``E`` line of its traceback in a pytest log (an exception and its message, cut to
    200 characters), for the ``nodes`` whose traceback the log holds. pytest heads a traceback with the
    test's name as ``Class.test[params]``, without the file: a name two files share is left out."""
    by_head: dict[str, list[str]] = {}
    for node in nodes:
        by_head.setdefault(node.split("::", 1)[-1].replace("::", "."), []).append(node)
    out: dict[str, str] = {}
    current: str | None = None
    for line in log.splitlines():
        section = _SECTION.match(line)
        if section:
            current = None
            continue
        head = _TRACEBACK_HEAD.match(line)
        if head:  # "test_x[p]", or "ERROR at setup of test_x[p]" for a fixture's error
            matches = by_head.get(re.sub(r"^ERROR at \w+ of ", "", head.group(1)), [])
            current = matches[0] if len(matches) == 1 else None
            continue
        raised = _RAISED.match(line)
        if current and raised and current not in out:
            out[current] = raised.group(1).strip()[:200]
    return out
