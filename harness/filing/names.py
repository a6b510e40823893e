"""Names a reproducer uses that only the change introduces: a reproducer calling an API the series adds shows
nothing about the code filed against (it is circular). Compared with the whole base tree, not just the touched
files: a name the upstream has elsewhere (a config field, a torch function) is no new API."""

from __future__ import annotations

import ast
import re

from harness.filing.lint import Finding

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# attributes reached from these names belong to torch, Triton or the standard library, not to the upstream
NOT_UPSTREAM = frozenset({"torch", "F", "nn", "np", "numpy", "math", "os", "sys", "json", "time", "re", "triton",
                          "tl", "functools", "itertools", "collections", "subprocess", "pathlib", "argparse"})


def _diff_names(diff: str) -> tuple[set[str], set[str]]:
    """(names on the diff's added lines, names on its context and removed lines)."""
    added: set[str] = set()
    kept: set[str] = set()
    for line in diff.splitlines():
        if line.startswith(("diff --git", "--- ", "+++ ", "index ", "@@")) or not line:
            continue
        (added if line.startswith("+") else kept).update(_NAME.findall(line[1:]))
    return added, kept


def added_only(diff: str, base_text: str) -> set[str]:
    """Names the change brings in: on its added lines, nowhere else in the diff, absent from the touched files as
    the filing base has them."""
    added, kept = _diff_names(diff)
    base = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", base_text))
    return {n for n in added - kept - base if len(n) >= 4}


def used_names(script: str) -> set[str]:
    """The upstream-facing names a script uses: attributes, imported names, keyword arguments, and strings that are
    identifiers (getattr, hasattr)."""
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in NOT_UPSTREAM):
                out.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            out.add(node.value)
    return out


def circular(diff: str, base_text: str, scripts: list[tuple[str, str]], in_base_tree) -> list[Finding]:
    """A reproducer that uses a name only the change introduces (absent from the whole base tree: ``in_base_tree``
    says which of a set of names it has, or None when it cannot be read) shows nothing about the code filed
    against."""
    new = added_only(diff, base_text)
    found = []
    for where, text in scripts:
        suspects = used_names(text) & new
        if not suspects:
            continue
        present = in_base_tree(suspects)
        for name in sorted(suspects - (present or set())):
            found.append(Finding(0, "circular reproducer", f"{where} uses `{name}`, which only the change "
                                                           "introduces" + ("" if present is not None else
                                                                           " (the base tree was not read)"),
                                 "body" if where == "minimal reproducer" else where))
    return found
